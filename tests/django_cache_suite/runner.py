"""The test runner of the suite run: Django's own, which also writes the outcome to the JSON
file ``$TXCACHE_SUITE_RESULTS`` for the test that started the run to compare."""

import json
import os
import unittest
from typing import Any, cast

from django.test.runner import DiscoverRunner


class RecordingRunner(DiscoverRunner):  # type: ignore[misc]  # Django ships no types
    """``DiscoverRunner`` that records each test id that failed, erred, was skipped or
    passed unexpectedly, and how many ran."""

    def suite_result(
        self, suite: unittest.TestSuite, result: unittest.TestResult, **kwargs: Any
    ) -> int:
        outcome = {
            "ran": result.testsRun,
            "failures": sorted(test.id() for test, _ in result.failures),
            "errors": sorted(test.id() for test, _ in result.errors),
            "skipped": sorted(test.id() for test, _ in result.skipped),
            "unexpected_successes": sorted(test.id() for test in result.unexpectedSuccesses),
        }
        with open(os.environ["TXCACHE_SUITE_RESULTS"], "w") as file:
            json.dump(outcome, file, indent=1)
        return cast(int, super().suite_result(suite, result, **kwargs))
