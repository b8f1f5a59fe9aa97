"""tests/tools/flakes.py, the flake detector: what it reads from pytest's JUnit XML (outcomes,
times, the figures tests record) and what it writes."""
import json
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "tools"))
import flakes

pytestmark = pytest.mark.unit

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="3">
<testcase classname="tests.test_a" name="test_ok" time="1.5">
  <properties><property name="best" value="200.5"/><property name="note" value="x"/></properties>
</testcase>
<testcase classname="tests.test_a" name="test_bad[1]" time="2.0"><failure message="boom"/></testcase>
<testcase classname="tests.test_b" name="test_skip" time="0.1"><skipped message="no"/></testcase>
</testsuite></testsuites>
"""


def test_junit_outcomes_times_and_numeric_figures(tmp_path):
    path = tmp_path / "run.xml"
    path.write_text(JUNIT)
    found = flakes.read_junit(str(path))
    assert found == {
        "tests/test_a.py::test_ok": {"outcome": "passed", "time": 1.5,
                                     "figures": {"best": 200.5}},
        "tests/test_a.py::test_bad[1]": {"outcome": "failed", "time": 2.0, "figures": {}},
        "tests/test_b.py::test_skip": {"outcome": "skipped", "time": 0.1, "figures": {}},
    }


def test_summary_counts_passes_and_keeps_every_figure_and_the_file_is_json():
    tests = {"t::a": [{"outcome": "passed", "time": 1.0, "figures": {"best": 3.0}},
                      {"outcome": "failed", "time": 2.0, "figures": {}},
                      {"outcome": "passed", "time": 1.5, "figures": {"best": 5.0}}]}
    summary = flakes.summarize(tests)
    assert summary == {"t::a": {"passed": 2, "runs": 3, "time_s": [1.0, 2.0, 1.5],
                                "best": [3.0, 5.0]}}
    text = flakes.results_json({"runs": 3, "load": 1}, summary)
    assert json.loads(text) == {"runs": 3, "load": 1, "tests": summary}
    assert flakes.spread([3.0, 5.0, 4.0]) == "min 3, median 4, max 5"


def test_bad_counts_are_refused():
    for argv in (["--runs", "0"], ["--load", "-1"]):
        with pytest.raises(SystemExit):
            flakes.parse_args(argv)
