"""The job store: one SQLite file holding jobs, leases, deliveries, verdicts and the box noise floors."""
