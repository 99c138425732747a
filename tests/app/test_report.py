"""The --out folder: checked without creating anything, before the work; created after it."""

from __future__ import annotations

import tempfile

import pytest

from grpo_identity.app import report
from grpo_identity.app.report import check_out_dir, output_folder, write_outputs


def _listing(path):
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


def test_a_missing_folder_passes_the_check_and_nothing_is_created(tmp_path):
    assert check_out_dir(tmp_path / "a" / "b") == tmp_path / "a" / "b"
    assert _listing(tmp_path) == []


def test_an_existing_folder_passes_and_keeps_its_files(tmp_path):
    (tmp_path / "keep.txt").write_text("x")
    check_out_dir(tmp_path)
    assert _listing(tmp_path) == ["keep.txt"]


@pytest.mark.parametrize(
    ("out", "message"),
    [
        ("{file}", "--out {file} is a file, not a folder"),
        ("{file}/sub/deeper", "--out {file}/sub/deeper: cannot create the folder ({file} is not a folder)"),
        ("/dev/null/x", "--out /dev/null/x: cannot create the folder (/dev/null is not a folder)"),
    ],
)
def test_a_path_through_a_file_is_one_line_naming_the_option(tmp_path, out, message):
    f = tmp_path / "afile"
    f.write_text("x")
    with pytest.raises(ValueError) as e:
        check_out_dir(out.format(file=f))
    assert str(e.value) == message.format(file=f)


def test_a_folder_that_refuses_a_file_is_reported_without_leaving_one(tmp_path, monkeypatch):
    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    with pytest.raises(ValueError, match=r"^--dir .*/new: cannot create the folder \(Permission denied in .*\)$"):
        check_out_dir(tmp_path / "new", "--dir")
    with pytest.raises(ValueError, match=r"^--out .*: cannot write in the folder \(Permission denied\)$"):
        check_out_dir(tmp_path)
    assert _listing(tmp_path) == []


def test_output_folder_creates_the_folder_and_write_outputs_fills_it(tmp_path):
    assert output_folder(tmp_path / "o").is_dir()
    write_outputs(tmp_path / "w", {"a.json": {"x": float("nan")}}, ("fig.txt", lambda p: open(p, "w").write("drawn")))
    assert (tmp_path / "w" / "a.json").read_text() == '{\n  "x": null\n}\n' and (
        tmp_path / "w" / "fig.txt"
    ).read_text() == "drawn"


def test_render_uses_the_same_folder_check():
    from grpo_identity.app import render

    assert render.output_folder is report.output_folder
