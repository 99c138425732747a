"""Solve-rate loaders: every format gives the same distribution; bad input fails in one line."""

from __future__ import annotations

import csv
import json
import socket

import numpy as np
import pytest

from grpo_identity import data
from grpo_identity.analysis import solve_rates as S
from grpo_identity.analysis.solve_rates import (
    COLUMN,
    SolveRates,
    big_math,
    from_histogram,
    from_values,
    load_solve_rates,
    resolve,
)

RATES = [0.0, 0.0, 1.0, 0.25, 0.5, 0.5, 0.75, 0.0625, 0.9375, 1.0]


def _same(sr: SolveRates) -> None:
    ref = from_values(RATES)
    np.testing.assert_array_equal(sr.values, ref.values)
    np.testing.assert_array_equal(sr.counts, ref.counts)


def test_csv_with_the_solve_rate_column_loads_every_problem(tmp_path):
    path = tmp_path / "rates.csv"
    path.write_text("problem,llama8b_solve_rate\n" + "".join(f"q{i},{r}\n" for i, r in enumerate(RATES)))
    _same(load_solve_rates(path))


def test_jsonl_loads_every_problem(tmp_path):
    path = tmp_path / "rates.jsonl"
    lines = [json.dumps({"problem": f"q{i}", COLUMN: r}) for i, r in enumerate(RATES)]
    path.write_text("\n".join(lines) + "\n")
    _same(load_solve_rates(path))


def test_parquet_loads_like_csv(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    path = tmp_path / "rates.parquet"
    pq.write_table(pa.table({"problem": [f"q{i}" for i in range(len(RATES))], COLUMN: RATES}), path)
    _same(load_solve_rates(path))


def test_histogram_csv_skips_comment_lines_and_sums_repeated_rates(tmp_path):
    path = tmp_path / "hist.csv"
    path.write_text(
        "# a histogram of solve rates\n"
        '"# a quoted comment, as spreadsheets write them"\n'
        "solve_rate,count\n0.0,2\n1.0,2\n0.25,1\n0.5,1\n0.5,1\n0.75,1\n0.0625,1\n0.9375,1\n0.3,0\n"
    )
    _same(load_solve_rates(path))


def test_a_file_without_the_column_is_rejected_naming_it(tmp_path):
    path = tmp_path / "x.csv"
    path.write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="llama8b_solve_rate"):
        load_solve_rates(path)


def test_solve_rates_outside_the_unit_interval_are_rejected(tmp_path):
    path = tmp_path / "x.csv"
    path.write_text("llama8b_solve_rate\n0.5\n1.5\n")
    with pytest.raises(ValueError, match="1.5"):
        load_solve_rates(path)


def test_negative_counts_and_unknown_suffixes_and_missing_files_are_rejected(tmp_path):
    with pytest.raises(ValueError, match="counts"):
        from_histogram([0.5], [-1])
    odd = tmp_path / "x.xlsx"
    odd.write_text("")
    with pytest.raises(ValueError, match="xlsx"):
        load_solve_rates(odd)
    with pytest.raises(FileNotFoundError):
        load_solve_rates(tmp_path / "absent.csv")


def _shipped_counts() -> dict[float, float]:
    """Independent reference: the shipped file read with the csv module, k/64 -> n_round."""
    with data.path(data.BIGMATH_HISTOGRAM).open() as fh:
        rows = list(csv.DictReader(line for line in fh if not line.startswith("#")))
    return {int(r["k"]) / 64: float(r["n_round"]) for r in rows}


def test_no_source_means_the_shipped_big_math_histogram():
    want = _shipped_counts()
    for sr in (resolve(None), resolve("bigmath"), big_math()):
        assert sr.values.tolist() == sorted(want) and sr.counts.tolist() == [want[v] for v in sorted(want)]
        assert sr.total == 215_608 and "Big-Math" in sr.source and "n_round" in sr.source


def test_the_shipped_file_read_as_a_user_file_gives_the_same_distribution():
    sr = load_solve_rates(data.path(data.BIGMATH_HISTOGRAM))
    want = _shipped_counts()
    assert sr.counts.tolist() == [want[v] for v in sorted(want)]


def test_interior_keeps_only_rates_strictly_between_0_and_1():
    sr = from_values(RATES).interior()
    assert sr.values.min() > 0 and sr.values.max() < 1 and sr.total == 6
    with pytest.raises(ValueError, match="strictly between"):
        from_values([0.0, 1.0]).interior()


def test_a_csv_with_a_byte_order_mark_loads(tmp_path):
    path = tmp_path / "rates.csv"
    path.write_bytes(("\ufeff" + "llama8b_solve_rate\n" + "".join(f"{r}\n" for r in RATES)).encode("utf-8"))
    _same(load_solve_rates(path))


def test_json_booleans_are_not_solve_rates(tmp_path):
    path = tmp_path / "rates.jsonl"
    path.write_text(json.dumps({COLUMN: True}) + "\n")
    with pytest.raises(ValueError, match="numeric, got True"):
        load_solve_rates(path)


def test_errors_name_the_bad_value_as_a_plain_number(tmp_path):
    path = tmp_path / "x.csv"
    path.write_text("llama8b_solve_rate\n1.5\n")
    with pytest.raises(ValueError, match=r"^x\.csv line 2: llama8b_solve_rate must be in \[0, 1\], got 1\.5$") as e:
        load_solve_rates(path)
    assert "np." not in str(e.value)


def test_a_directory_is_not_a_solve_rate_file(tmp_path):
    (tmp_path / "d.csv").mkdir()
    with pytest.raises(ValueError, match="not a file"):
        load_solve_rates(tmp_path / "d.csv")


# --- bad input: one line, naming the file and the line or row ----------------------------------
@pytest.mark.parametrize(
    "cell, message",
    [
        ("", "line 3: llama8b_solve_rate is missing"),
        ("nan", "line 3: llama8b_solve_rate is NaN"),
        ("NaN", "line 3: llama8b_solve_rate is NaN"),
        ("abc", "line 3: llama8b_solve_rate must be numeric, got 'abc'"),
    ],
)
def test_a_missing_or_nan_csv_value_is_an_error_naming_the_file_and_line(tmp_path, cell, message):
    path = tmp_path / "rates.csv"
    path.write_text(f"id,{COLUMN}\nq1,0.5\nq2,{cell}\nq3,0.25\n")
    with pytest.raises(ValueError, match=message) as e:
        load_solve_rates(path)
    assert str(e.value).startswith("rates.csv") and "\n" not in str(e.value)


def test_a_missing_jsonl_value_is_an_error_naming_the_line(tmp_path):
    path = tmp_path / "rates.jsonl"
    path.write_text(json.dumps({COLUMN: 0.5}) + "\n\n" + json.dumps({COLUMN: None}) + "\n")
    with pytest.raises(ValueError, match="rates.jsonl line 3: llama8b_solve_rate is missing"):
        load_solve_rates(path)


def test_a_nan_in_a_parquet_file_is_an_error_naming_the_row(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    path = tmp_path / "rates.parquet"
    pq.write_table(pa.table({COLUMN: [0.5, 0.25, float("nan")]}), path)
    with pytest.raises(ValueError, match="rates.parquet row 3: llama8b_solve_rate is NaN"):
        load_solve_rates(path)


def test_a_file_that_is_not_parquet_is_an_error_naming_it(tmp_path):
    pytest.importorskip("pyarrow")
    path = tmp_path / "rates.parquet"
    path.write_text("not parquet at all\n")
    with pytest.raises(ValueError, match="rates.parquet is not a readable parquet file") as e:
        load_solve_rates(path)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("name", ["rates.csv", "rates.jsonl"])
def test_an_undecodable_file_is_an_error_naming_it(tmp_path, name):
    path = tmp_path / name
    path.write_bytes(b"llama8b_solve_rate\n0.5\n\xff\xfe\x00\x81\n")
    with pytest.raises(ValueError, match=f"{name} is not UTF-8 text") as e:
        load_solve_rates(path)
    assert "\n" not in str(e.value)


def test_a_bad_histogram_row_names_its_line(tmp_path):
    path = tmp_path / "hist.csv"
    path.write_text("# comment\nsolve_rate,count\n0.5,1\n1.5,2\n")
    with pytest.raises(ValueError, match=r"hist.csv line 4: solve_rate must be in \[0, 1\], got 1.5"):
        load_solve_rates(path)
    path.write_text("solve_rate,count\n0.5,-1\n")
    with pytest.raises(ValueError, match="hist.csv line 2: count must be a finite count >= 0, got -1.0"):
        load_solve_rates(path)


def test_an_array_with_nan_names_the_position_as_a_plain_number():
    with pytest.raises(ValueError, match=r"got nan at position 2 of array") as e:
        from_values(np.array([0.5, np.nan]))
    assert "np." not in str(e.value)


def _no_network(monkeypatch):
    for var in (
        "HF_HUB_OFFLINE",
        "HF_DATASETS_OFFLINE",
        "HTTPS_PROXY",
        "https_proxy",
        "ALL_PROXY",
        "all_proxy",
        "HF_ENDPOINT",
    ):
        monkeypatch.delenv(var, raising=False)

    def refuse(*args, **kwargs):
        raise OSError("network is unreachable")

    monkeypatch.setattr(socket, "create_connection", refuse)


def test_a_hugging_face_spec_offline_fails_in_one_line_without_calling_the_hub(monkeypatch):
    datasets = pytest.importorskip("datasets")
    _no_network(monkeypatch)

    def never(*args, **kwargs):
        raise AssertionError("load_dataset was called although the host is unreachable")

    monkeypatch.setattr(datasets, "load_dataset", never)
    with pytest.raises(ValueError, match="hf:open-r1/Big-Math-RL-Verified-Processed: cannot reach huggingface.co") as e:
        resolve("hf:open-r1/Big-Math-RL-Verified-Processed")
    assert "\n" not in str(e.value)


def test_a_hub_error_becomes_one_line_naming_the_dataset(monkeypatch):
    datasets = pytest.importorskip("datasets")
    _no_network(monkeypatch)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the cache only: no probe, the hub's own error

    def fails(*args, **kwargs):
        raise ConnectionError("first line\nsecond line of a long traceback")

    monkeypatch.setattr(datasets, "load_dataset", fails)
    with pytest.raises(ValueError, match=r"hf:some/set: could not load the dataset \(ConnectionError: first line\)$"):
        S.load_hf_dataset("some/set")
