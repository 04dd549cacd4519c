"""The service and its operations: serve, workers, the box pool, draining, health, migrations, box setup."""
