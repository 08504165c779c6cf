"""Synthetic data judged by use: realism checks, the real-data stand-in, blind tests.

Public API: ``realism_report`` (per-slice statistics, MMD, classifier two-sample test, plots;
aggregates only), ``set_stats``, ``mmd_test``, ``c2st``, ``write_stand_in`` (a shifted-domain
set labelled as NOT real data), ``NOT_THE_TEST``. Targeted top-up lives in ``controls.topup``,
slice constraints in ``synthetic.slices``. See docs/synthetic-by-use.md.
"""

from analysis.realism._stats import SetStats, set_stats
from analysis.realism._tests import c2st, mmd_test
from analysis.realism.report import NOT_THE_TEST, realism_report
from analysis.realism.standin import STAND_IN_NOTE, write_stand_in

__all__ = [
    "NOT_THE_TEST",
    "STAND_IN_NOTE",
    "SetStats",
    "c2st",
    "mmd_test",
    "realism_report",
    "set_stats",
    "write_stand_in",
]
