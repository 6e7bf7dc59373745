"""Configs shipped with the package: `compare.yaml`, the main job of `neuralde-seq compare`."""
