"""A pytest plugin (pyproject: ``-p grade_plugin``): when nbval runs a worked solution, its graded cell must earn
every point as nbgrader's autograder counts them (``nbgrader.utils.determine_grade``): no error, nothing on stderr
(either is 0 points), and the number the cell shows equal to its points. The cell shows it through its hidden test,
``passed.score(points)``, which the exercise drops; the solution that scores less fails here."""
import pytest


def earned(outputs, points):
    """The points a grade cell with ``outputs`` earns, by nbgrader's rule for a code cell."""
    for out in outputs:
        if out.get("output_type") == "error" or out.get("output_type") == "stream" and out.get("name") == "stderr":
            return 0.0
        if out.get("output_type") == "execute_result":
            return float(out["data"]["text/plain"])
    return float(points)  # nothing shown: nbgrader gives every point


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    if call.when != "call" or type(item).__name__ != "IPyNbCell":
        return
    grading = item.cell.metadata.get("nbgrader", {})
    report = outcome.get_result()
    if report.failed or report.skipped or not grading.get("grade") or "solutions" not in str(item.fspath):
        return
    got = earned(item.test_outputs or [], grading["points"])
    if got != grading["points"]:
        report.outcome = "failed"
        report.longrepr = (f"the worked solution's graded cell earns {got:g} of its {grading['points']} points "
                           "(as nbgrader counts them: an error or anything on stderr is 0)")
