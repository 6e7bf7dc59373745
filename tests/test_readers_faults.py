"""Faulty ``.ts`` and ARFF files: non-finite tokens, files cut short, cases contradicting their header.

Every fault must raise ``ValueError`` naming the file, the line and the offending text; missing values
(``?``, ``NaN``) must still load as NaN. The truncation tests cut small files at every character and
check that each cut either raises or yields exactly a prefix of the complete file's cases, never a
changed case.
"""

import re

import numpy as np
import pytest

from neuralde_seq.data import embedded_path
from neuralde_seq.data.formats.arff import parse_arff, read_arff
from neuralde_seq.data.formats.ts_format import parse_ts, read_ts

TS_MULTI = """# two dimensions, labelled
@problemName Toy
@timeStamps false
@missing true
@univariate false
@dimensions 2
@equalLength false
@classLabel true up down
@data
1.5,2.25,-3:4,5,0.5:up
?,7.125:8,NaN:down
0.5,1.5,2.5,3.5:1,?,3,4:up
"""

TS_UNI = """@problemName Uni
@univariate true
@equalLength true
@seriesLength 4
@classLabel true left right
@data
1,2,3,4:left
5,6,7,8:right
-1,-2,?,-4:left
"""

ARFF_RELATIONAL = """% relational layout of the UEA multivariate archive
@relation 'Toy'
@attribute relationalAtt relational
@attribute att0 numeric
@attribute att1 numeric
@attribute att2 numeric
@end relationalAtt
@attribute activity {walk,run}
@data
'1.5,2.25,-3\\n4,5,0.5',walk
'?,7.125,NaN\\n8,9,10',run
'0.5,1.5,2.5\\n1,?,3',walk
"""

ARFF_FLAT = """@relation Flat
@attribute att1 numeric
@attribute att2 numeric
@attribute att3 numeric
@attribute target {yes,no}
@data
1,2,3,yes
4,?,6,no
7,8,NaN,yes
"""

FILES = {"toy.ts": TS_MULTI, "uni.ts": TS_UNI, "rel.arff": ARFF_RELATIONAL, "flat.arff": ARFF_FLAT}


def _parse(name: str, text: str):
    parse = parse_ts if name.endswith(".ts") else parse_arff
    return parse(text.splitlines(), source=name)


def _write(tmp_path, name: str, text: str):
    path = tmp_path / name
    path.write_text(text)
    return path


def _read(path):
    return read_ts(path) if path.suffix == ".ts" else read_arff(path)


def _first_value_line(text: str) -> int:
    lines = text.splitlines()
    return next(i for i, line in enumerate(lines, 1) if line.lower() == "@data") + 1


# ------------------------------------------------------------------------------------ non-finite values
SECOND_CASE = {  # the second case of each file, with {} where the faulty token goes
    "toy.ts": ("?,7.125:8,NaN:down", "?,{}:8,NaN:down"),
    "uni.ts": ("5,6,7,8:right", "5,{},7,8:right"),
    "rel.arff": ("'?,7.125,NaN\\n8,9,10',run", "'?,7.125,NaN\\n8,{},10',run"),
    "flat.arff": ("4,?,6,no", "4,?,{},no"),
}


@pytest.mark.parametrize("token", ["inf", "-inf", "1e400", "-1E+400", "Infinity", "+INF"])
@pytest.mark.parametrize("name", sorted(FILES))
def test_non_finite_token_names_file_line_and_token(tmp_path, name, token):
    old, new = SECOND_CASE[name]
    assert old in FILES[name]
    path = _write(tmp_path, name, FILES[name].replace(old, new.format(token)))
    with pytest.raises(ValueError) as info:
        _read(path)
    message = str(info.value)
    lineno = _first_value_line(FILES[name]) + 1
    assert message.startswith(f"{path}, line {lineno}: value {token!r} is not a finite number"), message


def test_non_finite_value_in_a_timestamped_ts_case(tmp_path):
    text = "@timeStamps true\n@univariate true\n@classLabel true a\n@data\n(0,1.0),(1,1e400):a\n"
    with pytest.raises(ValueError, match=re.escape("stamped.ts, line 5: value '1e400' is not a finite")):
        read_ts(_write(tmp_path, "stamped.ts", text))
    text = "@timeStamps true\n@univariate true\n@classLabel true a\n@data\n(0,1.0),(inf,2.0):a\n"
    with pytest.raises(ValueError, match=re.escape("stamped.ts, line 5: timestamp 'inf' is not finite")):
        read_ts(_write(tmp_path, "stamped.ts", text))


@pytest.mark.parametrize("name", sorted(FILES))
def test_missing_values_still_load_as_nan(tmp_path, name):
    data = _read(_write(tmp_path, name, FILES[name]))
    if name == "toy.ts":
        np.testing.assert_array_equal(data.series[1], [[np.nan, 7.125], [8.0, np.nan]])
        assert data.labels == ["up", "down", "up"]
    elif name == "uni.ts":
        np.testing.assert_array_equal(data.series[2], [[-1.0, -2.0, np.nan, -4.0]])
    elif name == "rel.arff":
        np.testing.assert_array_equal(data.series[1], [[np.nan, 7.125, np.nan], [8.0, 9.0, 10.0]])
        np.testing.assert_array_equal(data.series[0], [[1.5, 2.25, -3.0], [4.0, 5.0, 0.5]])
    else:
        np.testing.assert_array_equal(np.concatenate(data.series), [[1, 2, 3], [4, np.nan, 6], [7, 8, np.nan]])
    assert all(np.isfinite(s[~np.isnan(s)]).all() for s in data.series)


# -------------------------------------------------------------------------------------- cut-short files
def _same_case(a, b) -> bool:
    return a.shape == b.shape and np.array_equal(a, b, equal_nan=True)


@pytest.mark.parametrize("name", sorted(FILES))
def test_every_cut_raises_or_gives_a_prefix_of_complete_cases(name):
    text = FILES[name]
    full = _parse(name, text)
    line_ends = {m.start() for m in re.finditer("\n", text)}
    first_case_line = _first_value_line(text)
    prefixes = 0
    for cut in range(len(text)):
        piece = text[:cut]
        try:
            data = _parse(name, piece)
        except ValueError as error:
            message = str(error)
            assert message.startswith(name), message
            lines = piece.splitlines()
            if len(lines) >= first_case_line and cut not in line_ends and cut - 1 not in line_ends:
                # cut inside a case line: the message points at that line
                assert message.startswith(f"{name}, line {len(lines)}:"), (cut, message)
            continue
        # accepted: only whole cases, each exactly as in the complete file, ending at a line end
        k = len(data.series)
        assert 1 <= k <= len(full.series)
        assert all(_same_case(a, b) for a, b in zip(data.series, full.series)), (cut, piece[-30:])
        assert data.labels == full.labels[:k]
        assert cut in line_ends or cut - 1 in line_ends, (cut, piece[-30:])  # right before or after a "\n"
        prefixes += 1
    assert prefixes >= len(full.series) - 1  # the undetectable cuts after a complete case do load


@pytest.mark.parametrize("name", sorted(FILES))
def test_cut_in_header_or_right_after_data_says_so(tmp_path, name):
    text = FILES[name]
    data_at = text.index("@data\n")
    with pytest.raises(ValueError, match=r"no @data line \(the file ends in its header"):
        _read(_write(tmp_path, name, text[:data_at]))
    path = _write(tmp_path, name, text[: data_at + len("@data\n")])
    with pytest.raises(
        ValueError, match=re.escape(f"{path}, line {_first_value_line(text) - 1}: no cases after @data")
    ):
        _read(path)


# --------------------------------------------------------------------------- cases against their header
TS_CASES = [
    # (replacement of the second case of TS_MULTI, expected message after "line 11: ")
    ("?,7.125:8,NaN", "label '8,NaN' is not among the declared class labels"),  # label missing
    ("?,7.125:8,NaN:sideways", "label 'sideways' is not among the declared class labels"),
    ("?,7.125:down", "1 dimensions, header declares 2"),
    ("?,7.125:8,NaN:1:down", "3 dimensions, header declares 2"),
    ("?,7.125:8:down", "dimensions of one case have different lengths [2, 1]"),
    ("?,7.125:8,NaN:", "empty label"),
    ("?,7.1x:8,NaN:down", "cannot read '7.1x' as a number"),
]


@pytest.mark.parametrize("case, message", TS_CASES)
def test_ts_case_contradicting_header(tmp_path, case, message):
    text = TS_MULTI.replace("?,7.125:8,NaN:down", case)
    path = _write(tmp_path, "toy.ts", text)
    with pytest.raises(ValueError, match=re.escape(f"{path}, line 11: {message}")):
        read_ts(path)


@pytest.mark.parametrize(
    "text, message",
    [
        (TS_UNI.replace("5,6,7,8:right", "5,6,7:right"), "line 8: length 3, header declares @seriesLength 4"),
        (
            TS_UNI.replace("@seriesLength 4\n", "").replace("5,6,7,8:right", "5,6,7:right"),
            "line 7: length 3, earlier cases have 4 and the header declares @equalLength true",
        ),
        (
            TS_UNI.replace("@univariate true", "@univariate true\n@dimensions 2"),
            "line 3: @univariate true contradicts @dimensions 2",
        ),
        (
            TS_UNI.replace("@seriesLength 4", "@seriesLength 4\n@seriesLength 5"),
            "line 5: @seriesLength declared twice (first on line 4)",
        ),
        (
            TS_UNI.replace("@classLabel true left right", "@classLabel true"),
            "line 5: @classLabel true must list the class labels",
        ),
        (
            TS_UNI.replace("@seriesLength 4", "@seriesLength four"),
            "line 4: @serieslength expects an integer, got 'four'",
        ),
    ],
)
def test_ts_header_problems(tmp_path, text, message):
    path = _write(tmp_path, "uni.ts", text)
    with pytest.raises(ValueError, match=re.escape(f"{path}, {message}")):
        read_ts(path)


@pytest.mark.parametrize(
    "name, old, new, message",
    [
        (
            "rel.arff",
            "'?,7.125,NaN\\n8,9,10',run",
            "'?,7.125,NaN\\n8,9',run",
            "line 11: 2 values per channel (channel 1), the relational attribute declares 3",
        ),
        ("rel.arff", "'?,7.125,NaN\\n8,9,10',run", "'?,7.125,NaN',run", "line 11: 1 channels, earlier cases have 2"),
        (
            "rel.arff",
            "'?,7.125,NaN\\n8,9,10',run",
            "'?,7.125,NaN\\n8,9,10',swim",
            "line 11: class 'swim' is not among the declared values ['walk', 'run']",
        ),
        ("rel.arff", "'?,7.125,NaN\\n8,9,10',run", "'?,7.125,NaN\\n8,9,10',?", "line 11: missing class value"),
        ("rel.arff", "'?,7.125,NaN\\n8,9,10',run", "'?,7.125,NaN\\n8,9,10", "line 11: unterminated quoted value"),
        ("flat.arff", "4,?,6,no", "4,?,no", "line 8: 3 fields, expected 3 values and a class"),
        ("flat.arff", "4,?,6,no", "4,?,6,maybe", "line 8: class 'maybe' is not among the declared values"),
        ("flat.arff", "4,?,6,no", "4,?,six,no", "line 8: cannot read 'six' as a number"),
        ("flat.arff", "4,?,6,no", "4,,6,no", "line 8: empty value"),
    ],
)
def test_arff_case_contradicting_header(tmp_path, name, old, new, message):
    assert old in FILES[name]
    path = _write(tmp_path, name, FILES[name].replace(old, new))
    with pytest.raises(ValueError, match=re.escape(f"{path}, {message}")):
        read_arff(path)


def test_real_archive_files_still_load():
    # the embedded JapaneseVowels files come from the UEA archive: the checks must not refuse real data
    train, test = read_ts(embedded_path("JapaneseVowels_TRAIN.ts")), read_ts(embedded_path("JapaneseVowels_TEST.ts"))
    assert (len(train), len(test)) == (270, 370)
    assert all(s.shape[0] == 12 and np.isfinite(s).all() for s in train.series + test.series)
    assert set(train.labels) == set(train.class_labels) == {str(k) for k in range(1, 10)}


def test_percent_comments_in_a_ts_header_are_comments_and_nowhere_else():
    """aeon's own UnitTest_TRAIN.ts opens with "%#" lines (the ARFF comment mark) before its header: they are
    comments there, and the file reads as the same file without them; after @data a "%" line is no case and is
    refused (never silently skipped)."""
    plain = parse_ts(TS_UNI.splitlines(), source="uni.ts")
    commented = parse_ts(["%# a cut-down problem, for examples", "%"] + TS_UNI.splitlines(), source="uni.ts")
    assert np.array_equal(commented.labels, plain.labels)
    assert all(np.array_equal(a, b, equal_nan=True) for a, b in zip(commented.series, plain.series))
    lines = TS_UNI.splitlines()
    at = next(i for i, line in enumerate(lines) if line.strip().lower() == "@data")
    with pytest.raises(ValueError, match="uni.ts, line"):
        parse_ts(lines[: at + 1] + ["% not a case"] + lines[at + 1 :], source="uni.ts")
