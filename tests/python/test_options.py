"""The image transform's options are defined once (src/decode/transform_option_table.cc) and the
rest is derived: stoker.ImageLoader's signature, docstring and dict, and docs/augment.md's table
(scripts/gen_options.py). These tests fail when a derived part is stale, when an option does
not reach its C++ field, and when a bad value is not an error naming its option."""
from __future__ import annotations

import inspect
import pathlib
import re
import subprocess
import sys

import pytest

import stoker
from stoker._core import parse_transform_options, transform_options

REPO = pathlib.Path(__file__).resolve().parents[2]
TABLE = transform_options()


def test_the_generated_parts_are_current():
    r = subprocess.run([sys.executable, str(REPO / "scripts" / "gen_options.py"), "--check"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_the_loader_signature_has_every_option_with_the_table_default():
    params = inspect.signature(stoker.ImageLoader.__init__).parameters
    for option in TABLE:
        p = params[option["name"]]
        assert p.kind is inspect.Parameter.KEYWORD_ONLY
        assert p.default == option["default"], option["name"]
        assert f"{option['name']}:" in stoker.ImageLoader.__doc__


def other_value(option: dict):
    """A valid value of `option` that is not its default."""
    d, kind = option["default"], option["kind"]
    if kind == "bool":
        return not d
    if kind == "unsigned":
        return d + 300
    if kind == "number":
        return d / 2 + 0.125
    if kind == "choice":
        return next(c for c in option["choices"] if c != d)
    if kind == "size":
        return (d + 16, d + 32)
    if option["name"] == "scale":
        return (0.25, 0.75)
    return tuple(x + 0.25 for x in d)


@pytest.mark.parametrize("option", TABLE, ids=[o["name"] for o in TABLE])
def test_each_option_reaches_its_field_and_only_it(option):
    value = other_value(option)
    values = {"train": False} if option["name"] == "resize" else {}  # resize >= size when val
    values[option["name"]] = value
    parsed = parse_transform_options(values)
    assert parsed[option["name"]] == pytest.approx(value)
    for other in TABLE:
        if other["name"] not in values:
            assert parsed[other["name"]] == other["default"], other["name"]


@pytest.mark.parametrize("name, value, error, says", [
    ("train", 1, TypeError, "train must be True or False"),
    ("size", "224", ValueError, "size must be an int or (height, width)"),
    ("size", 10.5, ValueError, "size must be whole pixels"),
    ("scale", (0.5,), ValueError, "scale must be a number or a pair"),
    ("mean", (0.5, "x", 0.5), TypeError, "mean must be three numbers"),
    ("interpolation", "lanczos", ValueError, "interpolation must be one of 'bilinear'"),
    ("dtype", 8, TypeError, "dtype must be one of"),
    ("max_pixels", -1, ValueError, "max_pixels must be an int >= 0"),
    ("flip", 2.0, ValueError, "flip probability must be in [0, 1]"),
])
def test_a_bad_value_is_an_error_naming_the_option(name, value, error, says):
    with pytest.raises(error, match=re.escape(says)):
        parse_transform_options({name: value})


def test_an_unknown_option_is_refused():
    with pytest.raises(KeyError, match="unknown image option sizee"):
        parse_transform_options({"sizee": 224})


def test_numpy_numbers_are_numbers():
    np = pytest.importorskip("numpy")
    parsed = parse_transform_options({
        "mean": np.array([0.5, 0.25, 0.125], dtype=np.float32), "flip": np.float32(0.25),
        "size": np.int64(128), "max_pixels": np.uint32(1000), "scale": np.float64(0.5),
        "zoom": np.array([0.75, 1.25])})
    assert parsed["mean"] == (0.5, 0.25, 0.125)
    assert parsed["flip"] == 0.25
    assert parsed["size"] == 128
    assert parsed["max_pixels"] == 1000
    assert parsed["scale"] == (0.5, 0.5)
    assert parsed["zoom"] == (0.75, 1.25)


def test_none_keeps_the_default():
    assert parse_transform_options({"resize": None, "flip": None}) == parse_transform_options({})


def test_the_loader_checks_its_options_when_it_is_made(tmp_path):
    pytest.importorskip("torch")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.bin").write_bytes(b"x")
    stoker.pack(str(tmp_path / "src"), str(tmp_path / "ds"))
    with pytest.raises(ValueError, match="layout must be one of 'NCHW' 'NHWC', not 'CHW'"):
        stoker.ImageLoader(str(tmp_path / "ds"), layout="CHW")
    with pytest.raises(ValueError, match=r"resize \(100\) must be at least the crop size"):
        stoker.ImageLoader(str(tmp_path / "ds"), train=False, resize=100)
