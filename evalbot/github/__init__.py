"""GitHub integration: signed webhooks, typed events, commands, admission and publishing."""
