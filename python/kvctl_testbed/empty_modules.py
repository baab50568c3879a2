"""pytest plugin (`-p kvctl_testbed.empty_modules`, loaded by test/run-all.mjs): a test module that
collected no test fails the session. pytest itself only fails when the whole session collected
nothing (exit 5); a module whose tests are all misnamed, or that is empty, passes silently
otherwise. A module skipped at module level is a skip, not an empty module."""

from __future__ import annotations

import pytest

_empty: list[str] = []


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.passed and report.nodeid.endswith(".py") and not report.result:
        _empty.append(report.nodeid)


def pytest_terminal_summary(terminalreporter) -> None:  # noqa: ANN001 (pytest's own type)
    if _empty:
        terminalreporter.write_line(f"kvctl: test modules that collected no test: {', '.join(_empty)}", red=True)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    if _empty and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
