"""Full schema mode against the official JSON-Schema-Test-Suite, draft
2020-12, required files (vendored in tests/schema/suite, MIT-licensed).

Two files are set aside: ``refRemote.json`` (its schemas reference remote
documents, which registration refuses: nothing is fetched) and
``format.json`` (it tests the annotation-only default, and full mode asserts
formats). A few groups of the other files reference the
suite's remote documents too (``dynamicRef.json``'s ``tree.json``,
``vocabulary.json``'s custom meta-schemas): they are refused at registration
for the same reason, which one test checks, and are counted apart. On the
rest, at least 99% of the cases must agree: a case agrees when the verdicts
of ``is_valid`` and of ``validate`` are the suite's; a schema registration
refuses counts every one of its cases as a disagreement. The runner is
:func:`benchmarks.bench_schema.suite_agreement`, which the benchmark reports
too."""

from __future__ import annotations

import functools
from typing import Any

from benchmarks.bench_schema import suite_agreement as run_suite


@functools.cache
def suite_agreement() -> dict[str, Any]:
    return run_suite()


def test_the_vendored_suite_is_complete() -> None:
    report = suite_agreement()
    assert report["files"] == 44 and report["cases"] > 1000  # 46 files, two aside


def test_full_mode_agrees_with_at_least_99_percent_of_the_suites_cases() -> None:
    report = suite_agreement()
    assert report["agree_pct"] >= 99.0, "disagreements:\n" + "\n".join(report["disagreements"])


def test_the_groups_that_need_a_remote_document_are_refused_at_registration() -> None:
    report = suite_agreement()
    assert report["remote_groups"], "the suite's dynamicRef.json has groups that reference its remotes"
    for group in report["remote_groups"]:
        assert "remote reference" in group or "is not supported; name Draft 2020-12" in group, group
