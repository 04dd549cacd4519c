"""The one runner of every GPU run (scripts/gpu_run.sh, docs/gpu-e2e.md "The one command"): the
evaluations each issue's run makes (catalogue), the plan of stages and carried files for one run
(plan), the heads as checked text edits (heads_*), the e2e profiles (profiles), the detached chain
that runs the stages with one budget (chain) and the one summary it rewrites after every stage
(summary). Only the standard library and pyyaml are imported before the setup stage has
installed the wheels: what the chain imports at the top must run on a bare device image."""
