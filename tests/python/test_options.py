"""The image transform's options are defined once (src/decode/transform_option_table.cc) and the
rest is derived: stoker.ImageLoader's signature, docstring and dict, and docs/augment.md's table
(scripts/gen_options.py). So are pack's (src/dataset/pack_option_table.cc): `stoker pack`'s
flags, stoker.pack's keyword arguments, signature and docstring, and README.md's table. And the
loader's (src/loader/loader_option_table.cc): stoker.Loader's signature, docstring and checks,
and those of the options stoker.ImageLoader shares with it. These tests fail when a derived part
is stale, when an option does not reach its C++ field, and when a bad value is not an error
naming its option."""
from __future__ import annotations

import inspect
import pathlib
import re
import subprocess
import sys

import pytest

import stoker
from stoker._core import (loader_options, pack_options, parse_loader_options, parse_pack_options,
                          parse_transform_options, transform_options)

REPO = pathlib.Path(__file__).resolve().parents[2]
TABLE = transform_options()
PACK_TABLE = pack_options()
LOADER_TABLE = loader_options()


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


# stoker pack / stoker.pack


def test_pack_signature_has_every_option_with_the_table_default():
    signature, doc = stoker.pack.__doc__.split("\n", 1)
    assert signature.startswith("pack(src: object, dst: object, *, ")
    assert signature.endswith(", progress: bool = True) -> dict")
    for option in PACK_TABLE:
        default = repr(option["text"] if option["kind"] == "byte size" else option["default"])
        assert f" {option['name']}: " in signature and f" = {default}" in signature, option
        assert f"\n{option['name']}: {option['doc']}\n" in doc
    # The public defaults, as they were before the table.
    assert [(o["name"], o["text"]) for o in PACK_TABLE] == [
        ("chunk_size", "64MiB"), ("append", "false"), ("labels", "auto"), ("threads", "0"),
        ("order", "shuffled"), ("order_seed", "0"), ("mix_memory", "2GiB"), ("layout", "auto"),
        ("exclude", "")]


def other_pack_value(option: dict):
    """A valid value of pack `option` that is not its default, and what it reads back as."""
    d, kind = option["default"], option["kind"]
    if kind == "bool":
        return not d, not d
    if kind == "unsigned":
        return d + 3, d + 3
    if kind == "byte size":
        return "16KiB", 16 << 10
    if kind == "texts":
        return ["*.txt", "tmp/*"], ["*.txt", "tmp/*"]
    return next(c for c in option["choices"] if c != d), next(c for c in option["choices"]
                                                              if c != d)


@pytest.mark.parametrize("option", PACK_TABLE, ids=[o["name"] for o in PACK_TABLE])
def test_each_pack_option_reaches_its_field_and_only_it(option):
    value, read = other_pack_value(option)
    parsed = parse_pack_options({option["name"]: value})
    assert parsed[option["name"]] == read
    for other in PACK_TABLE:
        if other is not option:
            assert parsed[other["name"]] == other["default"], other["name"]


def test_pack_exclude_takes_one_pattern_or_a_list():
    assert parse_pack_options({"exclude": "*.txt"})["exclude"] == ["*.txt"]
    assert parse_pack_options({"exclude": ("a", "b")})["exclude"] == ["a", "b"]
    assert parse_pack_options({})["exclude"] == []


def test_pack_byte_sizes_take_ints_and_text():
    assert parse_pack_options({"chunk_size": 12345})["chunk_size"] == 12345
    assert parse_pack_options({"mix_memory": "8GiB"})["mix_memory"] == 8 << 30
    np = pytest.importorskip("numpy")
    assert parse_pack_options({"chunk_size": np.int64(4096)})["chunk_size"] == 4096


@pytest.mark.parametrize("name, value, error, says", [
    ("chunk_size", "1.5G", ValueError, "chunk_size: '1.5G' is not a size"),
    ("chunk_size", -1, ValueError, "chunk_size must be bytes >= 0"),
    ("chunk_size", 1.5, TypeError, "chunk_size must be bytes (an int) or text like '64MiB'"),
    ("mix_memory", "lots", ValueError, "mix_memory: 'lots' is not a size"),
    ("append", 1, TypeError, "append must be True or False"),
    ("labels", "some", ValueError, "labels must be one of 'auto' 'none'"),
    ("order", 3, TypeError, "order must be one of 'shuffled' 'path'"),
    ("layout", "flat", ValueError, "layout must be one of 'auto' 'tree' 'webdataset'"),
    ("threads", -1, ValueError, "threads must be an int >= 0"),
    ("threads", 1 << 40, ValueError, "threads must be at most 1024, not 1099511627776"),
    ("threads", 100000, ValueError, "threads must be at most 1024"),  # std::thread aborted
    ("order_seed", "7", TypeError, "order_seed must be an int"),
    ("exclude", 3, TypeError, "exclude must be a str or a list of str"),
    ("exclude", ["*.txt", b"x"], TypeError, "exclude must be a list of str"),
])
def test_a_bad_pack_value_is_an_error_naming_the_option(name, value, error, says):
    with pytest.raises(error, match=re.escape(says)):
        parse_pack_options({name: value})


def test_an_unknown_pack_keyword_is_refused(tmp_path):
    with pytest.raises(TypeError, match="unexpected keyword argument chunksize"):
        parse_pack_options({"chunksize": 4096})
    with pytest.raises(TypeError, match="unexpected keyword argument chunksize"):
        stoker.pack(tmp_path, tmp_path / "ds", chunksize=4096)
    with pytest.raises(TypeError, match="progress must be True or False"):
        stoker.pack(tmp_path, tmp_path / "ds", progress="no")
    assert not (tmp_path / "ds").exists()


def test_pack_cli_flags_are_the_table_options(stoker_cli, tmp_path):
    help_text = stoker_cli("pack", "--help", check=True).stdout
    for option in PACK_TABLE:
        flag = "--" + option["name"].replace("_", "-")
        assert flag in help_text, flag
        if option["kind"] == "texts":  # any text is a pattern; repeatable
            assert f"{flag} TEXT" in help_text, flag
        elif option["kind"] != "bool":
            assert f"={option['text']}" in help_text, flag
            proc = stoker_cli("pack", flag, "bad-value", tmp_path, tmp_path / "ds")
            assert proc.returncode == 2 and f"{flag}: 'bad-value' is not" in proc.stderr, flag


# stoker.Loader (and the options stoker.ImageLoader shares with it)


def test_the_loader_signature_is_the_public_one():
    params = inspect.signature(stoker.Loader.__init__).parameters
    # The public defaults, as they were before the table; None: chosen by the loader.
    assert {name: p.default for name, p in params.items() if name not in ("self",)} == {
        "source": inspect.Parameter.empty, "batch_size": None, "shuffle": "chunk",
        "seed": 0, "window": 16, "drop_last": False, "rank": None, "world_size": None,
        "memory_budget": None, "io_depth": 8, "block_size": None, "transform": None,
        "collate": None}
    for option in LOADER_TABLE:
        kind = (inspect.Parameter.POSITIONAL_OR_KEYWORD if option["name"] == "batch_size"
                else inspect.Parameter.KEYWORD_ONLY)
        assert params[option["name"]].kind is kind
        assert params[option["name"]].default == option["default"], option["name"]
        assert f"      {option['name']}: " in stoker.Loader.__doc__
    assert "memory_budget: int | str | None = None" in inspect.getsource(stoker.Loader.__init__)


def test_the_loaders_agree_on_positional_arguments_and_shared_defaults():
    """Every loader takes its source, then batch_size (each its own default: samples, 256
    images, 8 token blocks), then keywords only; an option it shares with stoker.Loader has
    the table's default and the table's description."""
    import stoker.torch
    table = {o["name"]: o for o in LOADER_TABLE}
    readers = {stoker.Loader: None, stoker.ImageLoader: 256, stoker.TokenLoader: 8,
               stoker.torch.StokerIterableDataset: "keywords only"}
    for cls, batch_default in readers.items():
        params = list(inspect.signature(cls.__init__).parameters.values())[1:]
        assert params[0].name == "source", cls
        assert params[0].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD, cls
        rest = params[1:]
        if batch_default != "keywords only":
            assert (params[1].name, params[1].default) == ("batch_size", batch_default), cls
            rest = params[2:]
        assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in rest), cls
        own = {"ImageLoader": ("shuffle",), "TokenLoader": ("shuffle",),
               "StokerIterableDataset": ("memory_budget",)}
        for p in rest:
            if p.name in table and p.name not in own.get(cls.__name__, ()):
                assert p.default == table[p.name]["default"], (cls, p.name)
                first_words = " ".join(table[p.name]["doc"].split()[:6])
                assert first_words in " ".join(cls.__doc__.split()), (cls, p.name)
    sig = inspect.signature(stoker.TokenLoader.__init__).parameters
    assert "seq_len" in sig and "block_size" not in sig


def test_the_old_name_of_the_source_still_works_with_a_warning(tmp_path):
    (tmp_path / "src" / "a").mkdir(parents=True)
    (tmp_path / "src" / "a" / "x.txt").write_bytes(b"x")
    stoker.pack(str(tmp_path / "src"), str(tmp_path / "ds"), progress=False)
    with pytest.deprecated_call(match=r"stoker.Loader\(uri_or_dataset=\.\.\.\) is deprecated"):
        loader = stoker.Loader(uri_or_dataset=str(tmp_path / "ds"), batch_size=1)
    assert [b[0][2] for b in loader] == ["a/x.txt"]
    with pytest.raises(TypeError, match="both uri_or_dataset= .* and source="):
        stoker.Loader(uri_or_dataset="x", source="y")


def test_the_image_loader_shares_the_loader_options_of_the_same_default():
    params = inspect.signature(stoker.ImageLoader.__init__).parameters
    assert params["batch_size"].default == 256 and params["shuffle"].default is None
    for option in LOADER_TABLE:
        if option["name"] not in ("batch_size", "shuffle"):
            assert params[option["name"]].default == option["default"], option["name"]
            assert f"      {option['name']}: " in stoker.ImageLoader.__doc__


def other_loader_value(option: dict):
    """A valid value of loader `option` that is not its default."""
    d, kind = option["default"], option["kind"]
    if kind == "bool":
        return not d
    if kind == "choice":
        return next(c for c in option["choices"] if c != d)
    return 3 if d is None else d + 3


@pytest.mark.parametrize("option", LOADER_TABLE, ids=[o["name"] for o in LOADER_TABLE])
def test_each_loader_option_reaches_its_field_and_only_it(option):
    value = other_loader_value(option)
    parsed = parse_loader_options({option["name"]: value})
    assert parsed[option["name"]] == value
    for other in LOADER_TABLE:
        if other is not option:
            assert parsed[other["name"]] == other["default"], other["name"]


def test_loader_none_keeps_the_default_and_sizes_take_text():
    defaults = parse_loader_options({})
    assert defaults == {o["name"]: o["default"] for o in LOADER_TABLE}
    assert parse_loader_options({"rank": None, "window": None}) == defaults
    assert parse_loader_options({"memory_budget": "2GiB"})["memory_budget"] == 2 << 30
    # Seeds of 64 random bits, as Loader took them before the table.
    assert parse_loader_options({"seed": 2**64 - 1})["seed"] == 2**64 - 1
    with pytest.raises(OverflowError,
                       match=r"seed must be below 2\*\*64, not 18446744073709551616"):
        parse_loader_options({"seed": 2**64})


@pytest.mark.parametrize("name, value, error, says", [
    ("shuffle", "random", ValueError, "shuffle must be one of 'sequential' 'full' 'chunk'"),
    ("batch_size", 0, ValueError, "batch_size must be at least 1"),
    ("batch_size", 2.5, TypeError, "batch_size must be an int"),
    ("window", 0, ValueError, "window must be at least 1"),
    ("io_depth", 0, ValueError, "io_depth must be at least 1"),
    ("world_size", 0, ValueError, "world_size must be at least 1"),
    ("rank", -1, ValueError, "rank must be an int >= 0"),
    ("seed", "7", TypeError, "seed must be an int"),
    ("drop_last", 1, TypeError, "drop_last must be True or False"),
    ("block_size", -1, ValueError, "block_size must be an int >= 0"),
    ("memory_budget", "lots", ValueError, "memory_budget: 'lots' is not a size"),
    ("memory_budget", 0, ValueError, "memory_budget must be at least 1 (bytes)"),
    # Below 0 where 0 is refused too: the option's own bound, not the type's.
    ("window", -1, ValueError, "window must be at least 1 (chunks per window), not -1"),
    ("batch_size", 10**12, ValueError, "batch_size is too large: 1000000000000"),
])
def test_a_bad_loader_value_is_an_error_naming_the_option(name, value, error, says):
    with pytest.raises(error, match=re.escape(says)):
        parse_loader_options({name: value})


def test_loader_rank_must_be_below_world_size(monkeypatch):
    from stoker._reading import env_world
    with pytest.raises(ValueError, match="rank 2 out of range for world_size 2"):
        parse_loader_options({"rank": 2, "world_size": 2})
    # From torchrun's variables: the message says where the numbers came from.
    monkeypatch.setenv("RANK", "1")
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with pytest.raises(ValueError, match=r"rank 1 out of range for world_size 1 \(rank from "
                                         r"\$RANK; world_size from the default\)"):
        env_world()
    monkeypatch.setenv("RANK", "abc")
    with pytest.raises(ValueError, match=r"\$RANK='abc' is not a whole number"):
        env_world()


def test_an_unknown_loader_keyword_is_refused():
    with pytest.raises(TypeError, match="unexpected keyword argument windows"):
        parse_loader_options({"windows": 4})


def test_the_loaders_check_their_options_when_they_are_made(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.bin").write_bytes(b"x")
    stoker.pack(str(tmp_path / "src"), str(tmp_path / "ds"))
    with pytest.raises(ValueError, match="window must be at least 1"):
        stoker.Loader(str(tmp_path / "ds"), window=0)
    with pytest.raises(ValueError, match="io_depth must be at least 1"):
        stoker.Loader(str(tmp_path / "ds"), io_depth=0)
    with pytest.raises(ValueError, match="memory_budget: 'lots' is not a size"):
        stoker.Loader(str(tmp_path / "ds"), memory_budget="lots")
