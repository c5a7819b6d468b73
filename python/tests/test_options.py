"""The Python option names and checks against the option table (src/core/option_table.cc), and
the Python module against the `flatcake` CLI built from the same table: a name, kind, range or
default that differs between them fails here."""

import json
import math
import subprocess

import pytest

import flatcake
import flatcake.sglang
from conftest import flatcake_bin

SPECS = flatcake.option_specs()
BY_NAME = {row["name"]: row for row in SPECS}


def cli(*args):
    return subprocess.run([flatcake_bin(), *args], capture_output=True, text=True, timeout=60, check=False)


def default_from_text(row):
    """The table's default text as the Python value its kind converts to."""
    text, kind = row["default"], row["kind"]
    if kind == "size":
        return flatcake.parse_size(text)
    if kind == "count":
        return int(text)
    if kind == "ratio":
        return float(text)
    if kind == "bool":
        return {"true": True, "false": False}[text]
    if kind == "path_list":
        return [d for d in text.split(",") if d]
    return text


def test_names_defaults_and_specs_are_one_list():
    names = [row["name"] for row in SPECS]
    assert names == flatcake.option_names()
    assert len(set(names)) == len(names)
    defaults = flatcake.default_options()
    assert list(defaults) == names
    for row in SPECS:
        assert defaults[row["name"]] == default_from_text(row), row["name"]
        if row["kind"] == "enum":
            assert row["range"] == "|".join(row["choices"])


def test_cli_and_python_read_the_same_table():
    # Catches a CLI and a Python module built from different tables (a stale build).
    p = cli("options", "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout) == SPECS


def test_every_store_flag_is_in_help_with_its_help_line():
    p = cli("info", "--help")
    assert p.returncode == 0, p.stderr
    text = " ".join(p.stdout.split())  # CLI11 wraps nothing, but be safe about spacing
    for row in SPECS:
        assert row["flag"] in text, row["flag"]
        assert " ".join(row["help"].split()) in text, row["name"]


def test_adapter_options_do_not_shadow_store_options():
    assert not set(flatcake.sglang.ADAPTER_OPTIONS) & set(BY_NAME)


def test_unknown_names_list_the_valid_ones():
    with pytest.raises(ValueError) as e:
        flatcake.normalize_config({"io_engin": "posix"})
    message = str(e.value)
    assert "unknown store option 'io_engin'" in message
    for name in BY_NAME:
        assert name in message


def good_value(row):
    """A valid non-default Python value for the row."""
    kind = row["kind"]
    if kind == "size":
        return "8MiB" if row["multiple"] > 1 or row["min"] > 0 else 8 << 20
    if kind == "count":
        return row["max"] if int(row["default"]) != row["max"] else row["min"]
    if kind == "ratio":
        return 0.9
    if kind == "bool":
        return row["default"] != "true"
    if kind == "enum":
        return row["choices"][-1]
    if kind == "path":
        return "/dev/shm/flatcake-arena"
    return ["/a", "/b"]


def expected(row, value):
    if row["kind"] == "size" and isinstance(value, str):
        return flatcake.parse_size(value)
    return value


@pytest.mark.parametrize("name", list(BY_NAME))
def test_each_option_takes_its_kind_and_range(name):
    row = BY_NAME[name]
    base = {"dram_bytes": "16MiB"} if name != "dram_bytes" else {}
    value = good_value(row)
    out = flatcake.normalize_config({**base, name: value})
    assert out[name] == expected(row, value)

    kind = row["kind"]
    wrong_type = {"size": [1.5, [1]], "count": ["two", 1.5, True], "ratio": ["half", True],
                  "bool": ["yes", 2], "enum": [1, None], "path_list": [3],
                  "path": [3, ["/a"]]}[kind]
    for bad in wrong_type:
        with pytest.raises((TypeError, ValueError), match=name):
            flatcake.normalize_config({**base, name: bad})

    out_of_range = []
    if kind in ("size", "count"):
        if row["min"] > 0:
            out_of_range.append(row["min"] - 1)
        if row["max"] < 2**64 - 1:
            out_of_range.append(row["max"] + 1)
        if row["multiple"] > 1:
            out_of_range.append(row["min"] + row["multiple"] + 1)
        out_of_range.append(-1)
    elif kind == "ratio":
        out_of_range += [1.5, -0.5, math.nan]
    elif kind == "enum":
        out_of_range.append("bogus")
    for bad in out_of_range:
        with pytest.raises(ValueError, match=name):
            flatcake.normalize_config({**base, name: bad})


def test_enum_errors_name_the_choices():
    with pytest.raises(ValueError, match="auto, uring, preadv, posix"):
        flatcake.normalize_config({"io_engine": "spdk"})
    with pytest.raises(ValueError, match="mas, fcfs"):
        flatcake.normalize_config({"scheduler": "rr"})


def test_scheduler_and_io_engine_reach_the_store(ssd_dir):
    config = {"ssd_dirs": [ssd_dir], "ssd_bytes": "16MiB", "ssd_file_bytes": "16MiB",
              "dram_bytes": "16MiB", "huge_pages": "none", "io_engine": "posix",
              "scheduler": "fcfs"}
    with flatcake.open(config) as store:
        opts = store.options()
        assert opts["io_engine"] == "posix" and opts["scheduler"] == "fcfs"
        assert store.info()["io_engine"] == "posix"
