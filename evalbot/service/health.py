"""Box health and the service's observability: periodic A/A drift checks, metrics, JSON logs.

A periodic A/A run (the `evalbot calibrate` job: base = head) measures today's noise per cell.
A cell has drifted when its variance is significantly larger than the stored floor's (one-sided
F test at `DRIFT_ALPHA`) *and* materially so (sd ratio above `DRIFT_RATIO`); an A/A that decides
improved or regressed anywhere is sick outright. The outcome is one row of `box_health` in the
store file; a worker leases no job for its box while the box's latest check failed
(`Worker.healthy`), and `alarm_text` is what maintainers are told. `metrics_text` renders the
store as Prometheus text; `MetricsApp` serves it.
"""

from __future__ import annotations

import json
import logging
import math
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import click

from evalbot.config.errors import EvalbotError
from evalbot.config.settings import BoxConfig
from evalbot.evaluation import pipeline
from evalbot.grading.witness_floor import FloorCheck, noisier
from evalbot.remote.box import Box
from evalbot.report.witness_floors import all_checks
from evalbot.service.calibrate import aa_noise, remeasure_witnesses, sick_cells
from evalbot.service.queue_metrics import intake_gauges
from evalbot.store import gauges, schema
from evalbot.store.health import Health, HealthStore
from evalbot.store.noise import WITNESS_FLOOR

DRIFT_RATIO = 1.5  # today's sd over the floor's: below this a drift is not worth an alarm
DRIFT_ALPHA = 0.01  # one-sided F test of today's variance against the floor's
DURATION_BUCKETS = (60.0, 300.0, 900.0, 1800.0, 3600.0, 7200.0, 21600.0)
log = logging.getLogger("evalbot.health")  # the JSON logs carry this name: kept from before evalbot.service





def drifted(floor: tuple[float, int], today: tuple[float, int], ratio: float = DRIFT_RATIO,
            alpha: float = DRIFT_ALPHA) -> bool:
    """Whether today's (sd, pairs) is significantly and materially noisier than the floor's."""
    (sd0, n0), (sd1, n1) = floor, today
    if n0 < 2 or n1 < 2:
        raise ValueError(f"need at least 2 pairs on each side, got {n0} and {n1}")
    return noisier((sd0, n0 - 1), (sd1, n1 - 1), ratio, alpha)


def assess(box: str, profile: str, results: dict[str, Any],
           floors: dict[str, tuple[float, int]], ratio: float = DRIFT_RATIO,
           alpha: float = DRIFT_ALPHA) -> Health:
    """Pure: today's A/A results against the stored floors (cell -> (sd, pairs)).

    `alpha` is the false-alarm rate per cell and check; `ratio` the smallest drift that counts.
    """
    reasons = [f"A/A not neutral in {c}" for c in sick_cells(results)]
    today = aa_noise(results)
    ratios = []
    for cell, (sd, n) in sorted(today.items()):
        if cell not in floors:
            continue  # no floor yet: `evalbot calibrate` sets one; nothing to drift from
        sd0, n0 = floors[cell]
        ratios.append(sd / sd0 if sd0 > 0 else math.inf)
        if drifted(floors[cell], (sd, n), ratio, alpha):
            reasons.append(f"{cell}: noise {100 * sd:.2f}% vs floor {100 * sd0:.2f}% "
                           f"({sd / sd0:.1f}x over {n} pairs)")
    return Health(box, profile, not reasons, tuple(reasons), max(ratios) if ratios else None)




SICK_RECHECK_S = 3600.0  # an unhealthy box gets no jobs, so re-checking it sooner costs nothing


def aa_due(last: Health | None, every_s: float, since: float, now: float) -> bool:
    """Whether a box's periodic A/A is due: `every_s` after its last check (or after `since`, the
    worker's start, for a box never checked: a restart does not trigger a run), at most an hour
    after a failed one; never when `every_s` is 0."""
    if every_s <= 0:
        return False
    if last is None:
        return now - since >= every_s
    wait = every_s if last.healthy else min(every_s, SICK_RECHECK_S)
    return now - last.at >= wait


def periodic_aa(box: Box, box_config: BoxConfig, job: Any, profile: str, store_path: Path,
                out: Path, notify: Callable[[str], None] | None = None,
                alpha: float = DRIFT_ALPHA) -> Health:
    """Run one A/A job (evalbot.service.calibrate.calibration_job) on the box and record its
    health; the witnesses it ran (those whose floor was stale) get their floors measured again."""
    store = HealthStore(store_path)
    try:
        try:
            results = pipeline.evaluate(box, box_config, job, out)
            floors = {k: v for k, v in store.floors(box_config.name, profile).items()
                      if not k.startswith(WITNESS_FLOOR)}  # a stale one is why it ran again
            health = assess(box_config.name, profile, results, floors, alpha=alpha)
            remeasure_witnesses(store_path, box_config.name, profile, job.base_sha, results)
        except EvalbotError as exc:  # an A/A that cannot run says as much about the box
            health = Health(box_config.name, profile, False, (f"A/A run failed: {exc}",), None)
    finally:
        store.close()
    return record_check(store_path, health, notify)


def record_check(store_path: Path, health: Health,
                 notify: Callable[[str], None] | None = None) -> Health:
    """Record a check's outcome. An unhealthy box is logged as an error and `notify` (e.g. a
    maintainers' issue or chat hook) gets `alarm_text`; a box healthy again is logged too."""
    store = HealthStore(store_path)
    try:
        before = store.latest().get(health.box)
        store.record(health)
    finally:
        store.close()
    if not health.healthy:
        log.error("box unhealthy", extra={"fields": {"box": health.box,
                                                     "reasons": list(health.reasons)}})
        if notify is not None and (before is None or before.healthy):
            notify(alarm_text(health))  # once per transition, not at every check
    elif before is not None and not before.healthy:
        log.warning("box healthy again", extra={"fields": {"box": health.box}})
    return health


def alarm_text(health: Health) -> str:
    lines = [f"evalbot: box `{health.box}` is unhealthy and gets no jobs until an A/A run "
             f"passes again (profile {health.profile}).", ""]
    lines += [f"- {r}" for r in health.reasons]
    lines += ["", "Re-check with `evalbot calibrate` on the box once it is fixed."]
    return "\n".join(lines)


# ---- metrics -----------------------------------------------------------------------------------
def metrics_text(store_path: Path) -> str:
    """Prometheus text exposition (0.0.4) of the store: queue, durations, verdicts, box health."""
    with schema.read_only(store_path) as db:
        found, floors = gauges.read(db), all_checks(db)
    out: list[str] = []
    _jobs(found, out)
    _durations(found, out)
    _verdicts(found, out)
    _health(found, out)
    _witness_floors(floors, out)
    intake_gauges(found, out)
    return "\n".join(out) + "\n"


def _jobs(found: gauges.Gauges, out: list[str]) -> None:
    counts = found.jobs
    out += ["# HELP evalbot_queue_length Jobs waiting for a worker.",
            "# TYPE evalbot_queue_length gauge", f"evalbot_queue_length {counts.get('queued', 0)}",
            "# HELP evalbot_jobs Jobs in the store by state.", "# TYPE evalbot_jobs gauge"]
    for state in ("queued", "running", "done", "failed", "superseded", "cancelled"):
        out.append(f'evalbot_jobs{{state="{state}"}} {counts.get(state, 0)}')


def _durations(found: gauges.Gauges, out: list[str]) -> None:
    values = found.durations
    out += ["# HELP evalbot_job_duration_seconds Harness wall time of finished evaluations.",
            "# TYPE evalbot_job_duration_seconds histogram"]
    for bound in DURATION_BUCKETS:
        out.append(f'evalbot_job_duration_seconds_bucket{{le="{bound:g}"}} '
                   f"{sum(v <= bound for v in values)}")
    out += [f'evalbot_job_duration_seconds_bucket{{le="+Inf"}} {len(values)}',
            f"evalbot_job_duration_seconds_sum {sum(values):.3f}",
            f"evalbot_job_duration_seconds_count {len(values)}"]


def _verdicts(found: gauges.Gauges, out: list[str]) -> None:
    counts = Counter(found.verdicts)
    rows = [(k, h, counts[(k, h)]) for k, h in sorted(counts, key=str)]
    out += ["# HELP evalbot_verdicts Verdicts recorded, by kind and headline label.",
            "# TYPE evalbot_verdicts gauge"]
    out += [f'evalbot_verdicts{{kind="{_label(k)}",headline="{_label(h)}"}} {n}'
            for k, h, n in rows]


def _health(found: gauges.Gauges, out: list[str]) -> None:
    rows = found.health
    out += ["# HELP evalbot_box_healthy 1 when the box's last A/A check passed.",
            "# TYPE evalbot_box_healthy gauge"]
    out += [f'evalbot_box_healthy{{box="{_label(b)}"}} {h}' for b, h, _w, _a in rows]
    out += ["# HELP evalbot_box_noise_ratio Worst sd ratio (today / floor) at the last check.",
            "# TYPE evalbot_box_noise_ratio gauge"]
    out += [f'evalbot_box_noise_ratio{{box="{_label(b)}"}} {w:.4f}' for b, _h, w, _a in rows
            if w is not None and math.isfinite(w)]
    out += ["# HELP evalbot_box_health_checked_seconds When the box was last checked (unix).",
            "# TYPE evalbot_box_health_checked_seconds gauge"]
    out += [f'evalbot_box_health_checked_seconds{{box="{_label(b)}"}} {a:.0f}'
            for b, _h, _w, a in rows]


def _witness_floors(found: list[tuple[str, FloorCheck]], out: list[str]) -> None:
    out += ["# HELP evalbot_witness_floor_stale 1 while the box's recent pairs refute the "
            "witness's floor: it confirms nothing there until it is measured again.",
            "# TYPE evalbot_witness_floor_stale gauge"]
    out += [f'evalbot_witness_floor_stale{{box="{_label(b)}",witness="{_label(c.witness)}"}} '
            f"{int(c.stale)}" for b, c in found]
    out += ["# HELP evalbot_witness_floor_ratio sd of main's pairs in recent jobs over the "
            "witness's floor.", "# TYPE evalbot_witness_floor_ratio gauge"]
    out += [f'evalbot_witness_floor_ratio{{box="{_label(b)}",witness="{_label(c.witness)}"}} '
            f"{c.ratio:.4f}" for b, c in found if c.ratio is not None]


def _label(value: object) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class MetricsApp:
    """A WSGI app: GET /metrics -> metrics_text; mount it next to the webhook app."""

    def __init__(self, store_path: Path, extra: Callable[[], list[str]] | None = None) -> None:
        self.store_path = store_path
        self.extra = extra  # the serving process's own gauges (rate-limit gate, dispatcher)

    def __call__(self, environ: dict[str, Any], start_response: Any) -> list[bytes]:
        if environ.get("REQUEST_METHOD") != "GET" or environ.get("PATH_INFO") != "/metrics":
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"GET /metrics\n"]
        text = metrics_text(self.store_path)
        if self.extra is not None:
            text += "\n".join(self.extra()) + "\n"
        body = text.encode()
        start_response("200 OK", [("Content-Type", "text/plain; version=0.0.4; charset=utf-8"),
                                  ("Content-Length", str(len(body)))])
        return [body]


# ---- structured logs ---------------------------------------------------------------------------
class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, and `extra={"fields": {...}}`."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {"ts": round(record.created, 3), "level": record.levelname,
                               "logger": record.name, "msg": record.getMessage()}
        doc.update(getattr(record, "fields", None) or {})
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc, sort_keys=True, default=str)


def setup_json_logging(stream: IO[str] | None = None, level: int = logging.INFO) -> None:
    """Route evalbot's loggers to `stream` (stderr) as JSON lines; call once at start-up."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger("evalbot")
    for old in [h for h in root.handlers if isinstance(h.formatter, JsonFormatter)]:
        root.removeHandler(old)  # calling it twice must not double every line
    root.addHandler(handler)
    root.setLevel(level)


@click.command("metrics")
@click.option("--store", "store_path", type=click.Path(path_type=Path), required=True,
              help="the bot's SQLite store file")
def metrics_cmd(store_path: Path) -> None:
    """Print the Prometheus metrics of the store (for a textfile collector or a quick look)."""
    if not store_path.is_file():
        raise EvalbotError(f"{store_path}: no such store")
    click.echo(metrics_text(store_path), nl=False)
