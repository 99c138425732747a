"""The grid file of ``grpo-identity matrix``: what it expands to, values as typed, and every bad grid one line."""

from __future__ import annotations

import pytest

from grpo_identity.app import grid as G
from grpo_identity.foundation import UsageError


def test_set_configs_and_axes_expand_in_the_order_written_each_at_every_release():
    grid = G.parse(
        """
audits:
  - target: verl
    releases: [0.7.1, 0.9.1]
    set: {algorithm.adv_estimator: grpo}
    configs: [{a: 1}, {a: 2, b: x}]
    axes: {c: [p, q]}
    options: {expect: dr_grpo, max-examples: 20}
"""
    )
    got = [(a.target, a.release) for a in grid.audits]
    base = "verl --set algorithm.adv_estimator=grpo"
    tail = "--expect dr_grpo --max-examples 20"
    assert got[:2] == [(f"{base} --set a=1 --set c=p {tail}", "0.7.1"), (f"{base} --set a=1 --set c=p {tail}", "0.9.1")]
    assert len(got) == 2 * 2 * 2 and len(set(got)) == 8
    assert (f"{base} --set a=2 --set b=x --set c=q {tail}", "0.9.1") in got


def test_values_stay_as_typed_in_yaml_and_in_json():
    yaml_grid = G.parse("audits: [{target: trl, releases: [0.10, 1.0], set: {beta: 0.040, use_vllm: true, x: null}}]")
    json_grid = G.parse('{"audits": [{"target": "trl", "releases": ["0.10", "1.0"], '
                        '"set": {"beta": 0.040, "use_vllm": true, "x": null}}]}')  # fmt: skip
    for grid in (yaml_grid, json_grid):
        assert [a.release for a in grid.audits] == ["0.10", "1.0"]
        assert grid.audits[0].target == "trl --set beta=0.040 --set use_vllm=true --set x=null"


def test_an_audit_without_an_expected_verdict_fails_the_run_on_fail_and_error_and_on_deviation_where_asked():
    plain, strict = G.Audit("grpo", None), G.Audit("grpo", None, deviation_fails=True)
    assert [plain.passes(v) for v in G.VERDICTS] == [True, True, False, False]
    assert [strict.passes(v) for v in G.VERDICTS] == [True, False, False, False]
    expected = G.Audit("trl", "0.22.2", verdict="fail")
    assert [expected.passes(v) for v in G.VERDICTS] == [False, False, True, False]  # a fixed bug fails it too


def test_a_verdict_per_release_and_deviation_fails_per_entry():
    grid = G.parse(
        """
deviation_fails: true
audits:
  - {target: trl, releases: [0.22.2, 1.16.0], verdict: {0.22.2: fail}}
  - {target: verl, releases: [0.9.1], deviation_fails: false, verdict: error}
"""
    )
    assert [(a.release, a.verdict, a.deviation_fails) for a in grid.audits] == [
        ("0.22.2", "fail", True),
        ("1.16.0", None, True),
        ("0.9.1", "error", False),
    ]
    assert grid.audits[0].argv() == ["audit", "trl", "--release", "0.22.2", "--json"]
    assert G.Audit("grpo", None).argv() == ["audit", "grpo", "--json"]


def test_strict_is_a_flag():
    (audit,) = G.parse("audits: [{target: rloo, options: {expect: grpo, strict: true}}]").audits
    assert audit.target == "rloo --expect grpo --strict"
    assert G.parse("audits: [{target: rloo, options: {strict: false}}]").audits[0].target == "rloo"


BAD = [
    ("audits: []", "audits: a list of at least one entry"),
    ("- a\n- b", "the grid: a mapping"),
    ("audits: [{target: trl, nope: 1}]", "audits[1]: unknown key 'nope'"),
    ("title: x\nextra: 1\naudits: [{target: grpo}]", "unknown key 'extra'"),
    ("audits: [{releases: [1.0]}]", "audits[1].target"),
    ("audits: [{target: 'trl; rm -rf /'}]", "audits[1].target: a value without spaces"),
    ("audits: [{target: trl, releases: [-1]}]", "'-1' is no version number"),
    ("audits: [{target: trl, releases: 1.0}]", "a list of version numbers"),
    ("audits: [{target: trl, set: {a: 'x y'}}]", "audits[1].set.a"),
    ("audits: [{target: trl, set: [a]}]", "a mapping of settings"),
    ("audits: [{target: trl, axes: {a: []}}]", "audits[1].axes.a: a list of at least one value"),
    ("audits: [{target: trl, configs: []}]", "audits[1].configs"),
    ("audits: [{target: trl, options: {release: 1.0}}]", "unknown key 'release'"),
    ("audits: [{target: trl, options: {strict: yes}}]", "strict: true or false"),
    ("audits: [{target: trl, releases: [1.0], verdict: great}]", "'great' is no verdict"),
    ("audits: [{target: trl, releases: [1.0], verdict: {2.0: fail}}]", "release '2.0' is not in"),
    ("deviation_fails: maybe\naudits: [{target: grpo}]", "deviation_fails: true or false"),
    ("audits: [{target: grpo}, {target: grpo}]", "listed twice"),
    (
        "audits: [{target: grpo, axes: {a: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10], b: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10], "
        "c: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10], d: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]}}]",
        "more than 10000 audits",
    ),  # fmt: skip
    (
        "audits: [{target: grpo, axes: {a: ["
        + ", ".join(map(str, range(100)))
        + "], b: ["
        + ", ".join(map(str, range(100)))
        + "], c: ["
        + ", ".join(map(str, range(100)))
        + "], d: ["
        + ", ".join(map(str, range(100)))
        + "]}}]",
        "more than 10000 audits (at audits[1])",
    ),  # fmt: skip
    ("audits: [{target: grpo\n", "is not YAML (line"),
    ('{"audits": [', "is not YAML (line"),
    ("audits: &a [*a]", "uses a YAML alias"),
    ("audits: [{target: grpo, configs: [&m {a: 1}, *m]}]", "uses a YAML alias"),
    ("audits: [{target: -h}]", "not starting with -"),
    ("audits: [{target: trl, set: {-x: 1}}]", "not starting with -"),
    ("audits: [{target: trl, options: {expect: --json}}]", "audits[1].options.expect"),
    ("audits: [{target: trl, set: {" + ", ".join(f"k{i}: v" for i in range(700)) + "}}]", "characters (at most 4000)"),
    ('{"audits": ' + "[" * 5000 + "]" * 5000 + "}", "nested too deeply"),
    ("audits:\n" + "".join("  " * i + "- \n" for i in range(1, 40)), "nested too deeply (more than 32 levels)"),
    ("audits: [{target: grpo, verdict: fail, verdict: pass}]", "the key 'verdict' is given twice"),
    ('{"audits": [{"target": "grpo", "target": "x"}]}', "the key 'target' is given twice"),
    ("audits: [{target: trl, set: {a: 1}, axes: {a: [1, 2]}}]", "the setting 'a' is given twice"),
]


@pytest.mark.parametrize(("text", "needle"), BAD, ids=[b[1] for b in BAD])
def test_a_bad_grid_is_one_usage_error_naming_where(text, needle):
    with pytest.raises(UsageError, match=None) as info:
        G.parse(text)
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_brackets_in_comments_and_values_are_not_nesting():
    text = "audits:\n" + "".join(f"  # see [{i}\n" for i in range(40)) + "  - {target: trl, set: {x: '[a'}}\n"
    assert G.parse(text).audits[0].target == "trl --set x=[a"


def test_a_set_value_may_start_with_a_minus_and_a_yaml_flow_mapping_is_yaml():
    (audit,) = G.parse("{audits: [{target: openrlhf, set: {reward.clip_range: '-1000,1000'}}]}").audits
    assert audit.target == "openrlhf --set reward.clip_range=-1000,1000"


def test_a_grid_file_too_large_missing_or_a_folder_is_refused_before_it_is_read(tmp_path):
    big = tmp_path / "big.yaml"
    big.write_text("#" * (G.MAX_BYTES + 1))
    for path, needle in ((big, "larger than"), (tmp_path / "absent.yaml", "no such file"), (tmp_path, "is not a file")):
        with pytest.raises(UsageError, match=needle):
            G.load(path)


def test_the_how_tos_example_grid_is_a_grid_and_expands_as_it_says():
    import re
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "how-to" / "matrix.md").read_text()
    grid = G.parse(re.search(r"```yaml\n(.*?)```", page, re.S).group(1))
    assert len(grid.audits) == 2 * 3 * 2 + 2  # TRL: 3 × 2 axes at 2 releases; verl: 2 configurations
    assert grid.audits[0].target.startswith("trl --set beta=0.0 --set loss_type=grpo --set scale_rewards=group")
    assert [a.verdict for a in grid.audits[:2]] == ["fail", None]
