"""Solve-rate loaders: every format gives the same distribution; bad input fails in one line."""

from __future__ import annotations

import json

import numpy as np
import pytest

from grpo_identity.analysis.realdata import summarise
from grpo_identity.analysis.solve_rates import (
    COLUMN,
    SolveRates,
    from_histogram,
    from_values,
    load_solve_rates,
    resolve,
    synthetic_default,
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


def test_jsonl_loads_and_drops_missing_values(tmp_path):
    path = tmp_path / "rates.jsonl"
    lines = [json.dumps({"problem": f"q{i}", COLUMN: r}) for i, r in enumerate(RATES)] + [json.dumps({COLUMN: None})]
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


def test_no_source_means_the_documented_synthetic_default():
    sr = resolve(None)
    assert sr.source.startswith("synthetic default")
    assert sr.values.size == 65 and sr.total == pytest.approx(1.0)


def test_the_synthetic_default_has_the_summaries_its_docstring_states():
    s = summarise(synthetic_default())
    assert (round(100 * s["frac_p0"], 1), round(100 * s["frac_p1"], 1)) == (6.5, 8.9)
    assert [round(100 * s["silent_closed_form"][g]) for g in ("4", "8", "16", "32", "64")] == [57, 42, 31, 24, 19]


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
    with pytest.raises(ValueError, match=r"got 1\.5 in") as e:
        load_solve_rates(path)
    assert "np." not in str(e.value)


def test_a_directory_is_not_a_solve_rate_file(tmp_path):
    (tmp_path / "d.csv").mkdir()
    with pytest.raises(ValueError, match="not a file"):
        load_solve_rates(tmp_path / "d.csv")
