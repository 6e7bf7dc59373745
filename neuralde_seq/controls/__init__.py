"""Controls: continuous paths X(s) built from irregularly sampled observations (`build_control`, `Control`), and the
disk cache of log-signature controls (`cached_logsignature_control`)."""
from .builder import (INTERPOLATIONS, MISSING_POLICIES, Control, RenamedOptionWarning, build_control,
                      renamed_control_options, resolve_time_unit, time_unit_value)
from .logsignature_cache import LogSignatureCacheError, cached_logsignature_control

__all__ = ["Control", "build_control", "resolve_time_unit", "time_unit_value", "RenamedOptionWarning",
           "renamed_control_options", "INTERPOLATIONS", "MISSING_POLICIES", "cached_logsignature_control",
           "LogSignatureCacheError"]
