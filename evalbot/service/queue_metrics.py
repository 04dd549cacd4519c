"""/metrics gauges for the stalls issue 34 found: the inbox, set-aside deliveries, verdicts not
on GitHub, the rate-limit gate and the dispatcher's life (docs/operations.md: what to alert on),
and how far the reconcile got (issue 47).

Read from the store file by evalbot.store.gauges; the rate-limit gate and the dispatcher live in
the serving process and come as `process_gauges`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from evalbot.store.gauges import Gauges

if TYPE_CHECKING:
    from evalbot.github.reconcile import Progress


def intake_gauges(found: Gauges, out: list[str]) -> None:
    (waiting, retrying, aside), (pending, given_up) = found.inbox, found.publication
    out += _gauge("evalbot_inbox_depth", "Webhook deliveries stored and not yet handled.",
                  waiting)
    out += _gauge("evalbot_inbox_retrying", "Deliveries waiting out a back-off after a GitHub "
                  "error (their PR's later deliveries wait behind them).", retrying)
    out += _gauge("evalbot_inbox_set_aside", "Deliveries set aside for a person (bad payload, "
                  "a bug, or hours of failures).", aside)
    out += _gauge("evalbot_unpublished", "Finished jobs whose verdict is not on GitHub yet.",
                  pending)
    surplus = {"help": 0, "refusal": 0, **found.surplus}
    out += ["# HELP evalbot_surplus_commands_total Commands dropped without a reply by the flood "
            "limiter (help: answered on the PR within 10 minutes; refusal: already told within "
            "the hour).", "# TYPE evalbot_surplus_commands_total counter"]
    out += [f'evalbot_surplus_commands_total{{reason="{k}"}} {v}' for k, v in sorted(
        surplus.items())]
    out += _gauge("evalbot_unpublished_given_up", "Finished jobs whose publication was given "
                  "up (a 4xx: locked, gone, no permission); `evalbot status --json` says why.",
                  given_up)


def process_gauges(rate_limited_s: float, dispatcher_alive: bool | None,
                   reconcile: Progress | None = None) -> list[str]:
    out = _gauge("evalbot_github_rate_limited_seconds", "Seconds until GitHub's rate limit "
                 "lets this process send requests again (0: open).", round(rate_limited_s, 1))
    if dispatcher_alive is not None:
        out += _gauge("evalbot_dispatcher_up", "1 while the webhook dispatcher runs.",
                      int(dispatcher_alive))
    return out + (reconcile_gauges(reconcile) if reconcile is not None else [])


def reconcile_gauges(p: Progress) -> list[str]:
    """How far the reconcile (evalbot.github.reconcile) got: the pass running now, else the
    last one."""
    return (_gauge("evalbot_reconcile_running", "1 while a reconcile pass runs (GitHub's open "
                   "PRs compared with the store, on its own thread).", int(p.running))
            + _gauge("evalbot_reconcile_listed", "Open PRs listed by this pass so far.",
                     p.listed)
            + _gauge("evalbot_reconcile_checked", "Listed PRs compared with the store so far.",
                     p.checked)
            + _gauge("evalbot_reconcile_admitted", "PRs this pass queued (heads the store did "
                     "not know).", p.admitted)
            + _gauge("evalbot_reconcile_left", "PRs GitHub failed or refused in this pass; "
                     "the next pass tries them again.", p.left)
            + _gauge("evalbot_reconcile_passes", "Reconcile passes completed since start.",
                     p.passes)
            + _gauge("evalbot_reconcile_completed_seconds", "When the last pass completed "
                     "(unix time; 0: none yet).", round(p.completed_at)))


def _gauge(name: str, text: str, value: float) -> list[str]:
    return [f"# HELP {name} {text}", f"# TYPE {name} gauge", f"{name} {value}"]
