"""The consistency checker: a workload under faults, and an exact verdict per read-only
transaction (``txcache check``; docs/check.md)."""

from txcache.check.run import CheckOptions, CheckReport, PhaseReport, TenantReport, run_check

__all__ = ["CheckOptions", "CheckReport", "PhaseReport", "TenantReport", "run_check"]
