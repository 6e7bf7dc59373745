"""Issue 24, readers: one encoding policy, one strict number grammar, and values beyond the dataset's dtype named
with their file and line, in every file reader; data-constructor messages that name what the caller named.

Each test writes its file from known text, and computes the expected line, byte offset and value from that text
(not from the reader), so a reader that decodes, counts or parses differently fails.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from neuralde_seq.data.formats.arff import decode_archive_text, read_arff
from neuralde_seq.data.formats.arrays import from_arrays
from neuralde_seq.data.formats.local_files import load_files, read_file
from neuralde_seq.data.formats.ts_format import from_ts, read_ts

TS_HEADER = (
    "@problemName Drinks\n@univariate true\n@equalLength true\n@seriesLength 3\n@classLabel true café thé\n@data\n"
)
TS_CASES = "1,2,3:café\n4,5,6:thé\n0.5,-1,2e-3:café\n7,8,9:thé\n"
ARFF_FLAT = (
    "@relation Drinks\n@attribute t1 numeric\n@attribute t2 numeric\n@attribute t3 numeric\n"
    "@attribute drink {café,thé}\n@data\n1,2,3,café\n4,5,6,thé\n0.5,-1,2e-3,café\n7,8,9,thé\n"
)
ARFF_RELATIONAL = (
    "@relation Drinks\n@attribute series relational\n@attribute t1 numeric\n@attribute t2 numeric\n"
    "@end series\n@attribute drink {café,thé}\n@data\n'1,2\\n3,4',café\n'5,6\\n7,8',thé\n"
    "'1,2\\n3,4',café\n'5,6\\n7,8',thé\n"
)


def _line_of(text: str, needle: str) -> int:
    """1-based line of the first occurrence of ``needle``, counting ``\\n`` only."""
    return text[: text.index(needle)].count("\n") + 1


# ------------------------------------------------------------------------------------------ encoding policy
@pytest.mark.parametrize("reader", ["read_ts", "read_arff", "read_file", "load_files"])
def test_a_non_utf8_byte_is_refused_naming_file_line_and_byte(tmp_path, reader):
    """Silent 3: one Latin-1 byte in a comment made the whole UTF-8 file decode as Latin-1 (café -> cafÃ©)."""
    ext = "arff" if reader == "read_arff" else "ts"
    text = TS_HEADER + TS_CASES if ext == "ts" else ARFF_FLAT
    comment = b"# na\xefve comment\n" if ext == "ts" else b"% na\xefve comment\n"
    head, tail = text.encode().split(b"@data\n")
    raw = head + b"@data\n" + tail[:10] + tail[10:].replace(b"\n", b"\n" + comment, 1)
    offset = raw.index(b"\xef")
    line = raw[:offset].count(b"\n") + 1
    path = tmp_path / f"Drinks_TRAIN.{ext}"
    path.write_bytes(raw)
    (tmp_path / f"Drinks_TEST.{ext}").write_bytes(raw)
    call = {
        "read_ts": read_ts,
        "read_arff": read_arff,
        "read_file": read_file,
        "load_files": lambda p: load_files(p, tmp_path / f"Drinks_TEST.{ext}", validation_fraction=0.5),
    }[reader]
    with pytest.raises(ValueError) as info:
        call(path)
    message = str(info.value)
    assert message.startswith(f"{path}, line {line}: byte 0xEF at byte offset {offset} "), message
    assert "not valid UTF-8" in message and "re-save it as UTF-8" in message and "encoding=" in message


def test_the_file_read_with_its_named_encoding_or_as_utf8_keeps_the_labels(tmp_path):
    """The same labels from a UTF-8 file, its Latin-1 re-encoding read with encoding='latin-1', and a BOM."""
    text = TS_HEADER + TS_CASES
    utf8, latin, bom = tmp_path / "u.ts", tmp_path / "l.ts", tmp_path / "b.ts"
    utf8.write_bytes(text.encode("utf-8"))
    latin.write_bytes(text.encode("latin-1"))
    bom.write_bytes(b"\xef\xbb\xbf" + text.encode("utf-8"))
    expected = ["café", "thé", "café", "thé"]
    assert read_ts(utf8).labels == expected
    assert read_ts(latin, encoding="latin-1").labels == expected
    assert read_ts(bom).labels == expected  # the BOM is not part of the first header line
    assert read_file(latin, encoding="latin-1").class_names == ["café", "thé"]
    with pytest.raises(ValueError, match=re.escape(f"{latin}, line 5: byte 0xE9")):  # é in the header
        read_ts(latin)


@pytest.mark.parametrize(
    "encoding, error, message",
    [
        (5, TypeError, "encoding must be None (UTF-8) or the name of a text encoding"),
        ("no-such-codec", ValueError, "encoding='no-such-codec' is not a text encoding"),
        ("base64", ValueError, "encoding='base64' is not a text encoding"),
    ],
)
def test_an_encoding_argument_is_checked(tmp_path, encoding, error, message):
    path = tmp_path / "X_TRAIN.ts"
    path.write_text(TS_HEADER + TS_CASES, encoding="utf-8")
    for call in (
        lambda: read_ts(path, encoding=encoding),
        lambda: read_arff(path, encoding=encoding),
        lambda: read_file(path, encoding=encoding),
        lambda: load_files(path, path, encoding=encoding),
    ):
        with pytest.raises(error, match=re.escape(message)):
            call()


def test_line_numbers_count_line_breaks_only(tmp_path):
    """U+2028 (LINE SEPARATOR) in a comment is text, not a line break: the bad value's line is the editor's."""
    text = TS_HEADER.replace("@data\n", "# a comment \u2028 with a separator\n@data\n") + TS_CASES.replace("5,", "x,")
    path = tmp_path / "sep.ts"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match=re.escape(f"{path}, line {_line_of(text, 'x,')}: cannot read 'x'")):
        read_ts(path)


def test_an_archive_member_that_is_not_utf8_is_named(tmp_path):
    raw = (TS_HEADER + TS_CASES).encode("latin-1")
    with pytest.raises(
        ValueError, match=re.escape("Multivariate2018_ts.zip:Drinks/Drinks_TRAIN.ts, line 5: byte 0xE9")
    ):
        decode_archive_text(raw, "Multivariate2018_ts.zip:Drinks/Drinks_TRAIN.ts")


# ------------------------------------------------------------------------------------------ number grammar
# Each file with one token replaced; the token's line and its place in words (independent of the reader).
GRAMMAR_SITES = {
    "ts value": ("t.ts", TS_HEADER + TS_CASES, "4,5,6:thé", "4,{},6:thé", "dimension 1, value 2"),
    "ts second dimension": (
        "t.ts",
        "@problemName D\n@dimensions 2\n@classLabel true café thé\n@data\n1,2,3:9,9,9:café\n4,5,6:9,8,9:thé\n",
        "4,5,6:9,8,9:thé",
        "4,5,6:9,{},9:thé",
        "dimension 2, value 2",
    ),
    "arff flat": ("f.arff", ARFF_FLAT, "4,5,6,thé", "4,{},6,thé", "field 2"),
    "arff relational": ("r.arff", ARFF_RELATIONAL, "'5,6\\n7,8',thé", "'5,6\\n7,{}',thé", "channel 2, value 2"),
}


@pytest.mark.parametrize(
    "token, why",
    [
        ("1_5", "underscore"),  # float() reads 15.0
        ("١٢", "non-ASCII digits"),  # Arabic-Indic digits: float() reads 12.0
        ("１", "non-ASCII digits"),  # a full-width digit: float() reads 1.0
    ],
)
@pytest.mark.parametrize("site", sorted(GRAMMAR_SITES))
def test_numbers_outside_the_strict_grammar_are_refused(tmp_path, site, token, why):
    """Silent 4: Python's float() grammar read 1_5 as 15.0 and ١٢ as 12.0 in .ts and ARFF files."""
    name, text, old, new, place = GRAMMAR_SITES[site]
    assert old in text
    text = text.replace(old, new.format(token))
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    line = _line_of(text, new.format(token))
    read = read_ts if name.endswith(".ts") else read_arff
    with pytest.raises(ValueError) as info:
        read(path)
    message = str(info.value)
    assert message.startswith(f"{path}, line {line}: cannot read {token!r} as a number ({place})"), message
    assert why in message


@pytest.mark.parametrize(
    "text, old, new, message",
    [
        (
            TS_HEADER.replace("@classLabel true café thé", "@targetLabel true")
            + TS_CASES.replace("café", "1.5").replace("thé", "2"),
            "4,5,6:2",
            "4,5,6:2_5",
            "target '2_5' is not a number (it holds an underscore",
        ),
        (TS_HEADER + TS_CASES, "@seriesLength 3", "@seriesLength ٣", "@serieslength expects an integer, got '٣'"),
        (
            "@timeStamps true\n@univariate true\n@classLabel true a\n@data\n(0,1),(1_0,2):a\n(0,1),(1,2):a\n",
            "(1_0,2)",
            "(1_0,2)",
            "timestamp '1_0' is not a number (it holds an underscore",
        ),
        (
            "@timeStamps true\n@univariate true\n@classLabel true a\n@data\n(0,1),(1,2):a\n(0,1),(1,2):a\n",
            "(1,2):a\n(0",
            "(1,٢):a\n(0",
            "cannot read '٢' as a number (tuple 2)",
        ),
    ],
)
def test_targets_header_integers_and_timestamps_follow_the_grammar(tmp_path, text, old, new, message):
    assert old in text
    text = text.replace(old, new, 1)
    path = tmp_path / "g.ts"
    path.write_text(text, encoding="utf-8")
    line = _line_of(text, new)
    with pytest.raises(ValueError, match=re.escape(f"{path}, line {line}: {message}")):
        read_ts(path)


def test_numbers_inside_the_grammar_read_as_float_reads_them(tmp_path):
    """Guard: every form the formats write (signs, exponents, bare points, spaces, ?, NaN) still reads."""
    tokens = ["1", "-2.5", ".5", "3.", "1e-3", "+4E+02", " 7 ", "-0", "?", "NaN", "nan", "12345678901234567890"]
    body = ",".join(tokens)
    path = tmp_path / "ok.ts"
    path.write_text(f"@univariate true\n@classLabel true a\n@data\n{body}:a\n", encoding="utf-8")
    got = read_ts(path).series[0][0]
    expected = np.array([np.nan if t == "?" else float(t) for t in tokens])
    np.testing.assert_array_equal(got, expected)


# ------------------------------------------------------------------------------------------ dtype range
@pytest.mark.parametrize("ext", ["ts", "arff"])
def test_a_value_overflowing_float32_is_named_with_file_and_line(tmp_path, ext):
    """Unhelpful: a finite 1e308 in a float32 file was 'an infinite entry (sample 1, ...)', without file or line."""
    text = (
        (TS_HEADER + TS_CASES).replace("4,5,6:", "4,1e308,6:")
        if ext == "ts"
        else ARFF_FLAT.replace("4,5,6,", "4,1e308,6,")
    )
    path = tmp_path / f"Big_TRAIN.{ext}"
    path.write_text(text, encoding="utf-8")
    line = _line_of(text, "1e308")
    place = "dimension 1, value 2" if ext == "ts" else "channel 1, value 2"
    expected = f"{path}, line {line} (case 1, 0-based): value 1e+308 ({place}) overflows torch.float32"
    path.with_name(f"Other_TEST.{ext}").write_text(text.replace("1e308", "5"), encoding="utf-8")
    for call in (
        lambda: read_file(path),
        lambda: load_files(path, path.with_name(f"Other_TEST.{ext}")),
        lambda: from_ts(read_ts(path) if ext == "ts" else read_arff(path)),
    ):
        with pytest.raises(ValueError) as info:
            call()
        assert str(info.value).startswith(expected), str(info.value)
        assert "3.4e+38" in str(info.value)


def test_a_value_beyond_the_float32_range_suggests_float64_which_reads_it(tmp_path):
    text = (TS_HEADER + TS_CASES).replace("7,8,9:", "7,8,-2.5e10:")
    path = tmp_path / "wide.ts"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError) as info:
        read_file(path)
    message = str(info.value)
    assert message.startswith(
        f"{path}, line {_line_of(text, '-2.5e10')} (case 3, 0-based): value -25000000000.0 "
        "(dimension 1, value 3) lies outside the finite range"
    ), message
    assert "read_file (range" in message and "dtype=torch.float64" in message
    wide = read_file(path, dtype=torch.float64)
    assert wide.values[3, 2, 0].item() == -2.5e10  # exactly the file's value, in the dtype the message names


def test_from_arrays_names_the_sample_of_a_value_overflowing_float32():
    sequences = [np.array([[1.0], [2.0]]), np.array([[3.0], [1e308], [4.0]])]
    with pytest.raises(
        ValueError, match=re.escape("sequences[1] holds 1e+308 at step 1, channel 0, which overflows torch.float32")
    ):
        from_arrays(sequences, ["a", "b"])
    times = [np.array([0.0, 1.0]), np.array([0.0, 1.0, 1e39])]
    with pytest.raises(ValueError, match=re.escape("times[1] holds 1e+39 at step 2, which overflows torch.float32")):
        from_arrays([s.clip(max=9) for s in sequences], ["a", "b"], times=times)


# ------------------------------------------------------------------------------------------ DataFrames
def _frame(**columns):
    pd = pytest.importorskip("pandas")
    base = {"id": [0, 0, 1, 1], "time": [0.0, 1.0, 0.0, 1.0], "x": [1.0, 2.0, 3.0, 4.0], "label": ["a", "a", "b", "b"]}
    base.update(columns)
    return pd.DataFrame({k: v for k, v in base.items() if v is not None})


def test_from_long_dataframe_names_the_columns_the_caller_named():
    """Unhelpful: with label_column='label' the messages blamed value_columns, labels or id_column, which the
    caller never named."""
    from neuralde_seq.data.formats.dataframes import from_long_dataframe

    # an extra text column taken as a channel by default
    with pytest.raises(
        TypeError,
        match=r"column 'subject' holds .* not numbers: it was taken as a channel because "
        r"value_columns was not given \(every column except id 'id', time 'time', "
        r"label 'label' is a channel\)",
    ):
        from_long_dataframe(_frame(subject=["p", "p", "q", "q"]), label_column="label")
    # labels of two types
    with pytest.raises(ValueError, match=r"^label_column 'label' mixes label types that cannot be sorted \(int, str\)"):
        from_long_dataframe(_frame(label=["a", "a", 1, 1]), label_column="label")
    # an unhashable label
    with pytest.raises(ValueError, match=r"^label_column 'label' holds an unhashable value \[1\] at row 0"):
        from_long_dataframe(_frame(label=[[1], [1], [2], [2]]), label_column="label")
    # the default id column absent (the ids are the frame's index)
    with pytest.raises(
        KeyError,
        match=r"id_column defaults to 'id'.*'id' is the frame's index: pass "
        r"frame.reset_index\(\)",
    ):
        from_long_dataframe(_frame().set_index("id"), label_column="label")
    # a value overflowing float32, named by column, row and id
    with pytest.raises(
        ValueError, match=re.escape("value column 'x' holds 1e+300 at row 2 (id 1), which overflows torch.float32")
    ):
        from_long_dataframe(_frame(x=[1.0, 2.0, 1e300, 4.0]), label_column="label")
