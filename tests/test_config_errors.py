"""What a maintainer sees for a broken config: the file and line, every problem at once."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalbot.config.errors import ConfigError
from evalbot.config.settings import load_config

BOX = "boxes:\n  - {name: a, kind: local, workdir: /tmp/w}\n"


def _load(tmp_path: Path, text: str) -> str:
    path = tmp_path / "evalbot.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    return str(err.value)


def test_a_yaml_syntax_error_names_the_file_and_line(tmp_path: Path) -> None:
    message = _load(tmp_path, "profile: demo\n" + BOX + "github:\n  repo: [unclosed\n")
    assert message.startswith(f"{tmp_path / 'evalbot.yaml'}:")
    line = int(message.split(":")[1])
    assert line in (5, 6), message  # where the flow sequence is left open
    assert "<unicode string>" not in message and "\n" not in message  # not PyYAML's dump


def test_a_duplicate_key_is_refused_not_last_wins(tmp_path: Path) -> None:
    message = _load(tmp_path, "profile: demo\npolicy: default\n" + BOX + "policy: sparkinfer-compat\n")
    assert ":5: policy: duplicate key (first at line 2)" in message


def test_a_duplicate_key_inside_a_box_is_refused(tmp_path: Path) -> None:
    message = _load(tmp_path, "profile: demo\nboxes:\n  - name: a\n    kind: local\n"
                              "    workdir: /tmp/w\n    trusted: false\n    trusted: true\n")
    assert ":7: boxes[0].trusted: duplicate key (first at line 6)" in message


def test_every_problem_is_shown_at_once(tmp_path: Path) -> None:
    message = _load(tmp_path, "profile: demo\nprofiel: typo\n"
                              "boxes:\n  - {name: a, kind: local, workdir: /tmp/w, port: 0}\n"
                              "  - {name: b, kind: tcp, workdir: /tmp/w}\n"
                              "github:\n  repo: o/r\n  quota_per_pr_per_day: -1\n"
                              "service:\n  metrics_port: 70000\n")
    assert message.startswith("5 problems:"), message
    for part in (":2: profiel: unknown key", ":4: boxes[0].port: must be a port number",
                 ":5: boxes[1].kind: 'tcp' is not one of local, ssh",
                 ":8: github.quota_per_pr_per_day: must be a whole number >= 0",
                 ":10: service.metrics_port: must be a port number"):
        assert part in message, (part, message)


@pytest.mark.parametrize("key", ["quota_per_author_per_day", "quota_per_pr_per_day"])
def test_a_negative_quota_is_refused(tmp_path: Path, key: str) -> None:
    message = _load(tmp_path, "profile: demo\n" + BOX + f"github:\n  repo: o/r\n  {key}: -5\n")
    assert f":6: github.{key}: must be a whole number >= 0 (0: no limit)" in message


def test_a_valid_config_with_zero_quota_still_loads(tmp_path: Path) -> None:
    path = tmp_path / "evalbot.yaml"
    path.write_text("profile: demo\n" + BOX + "github:\n  repo: o/r\n  quota_per_pr_per_day: 0\n")
    config = load_config(path)
    assert config.github is not None and config.github.quota_per_pr_per_day == 0


@pytest.mark.parametrize(("section", "key", "value", "problem"), [
    ("github:\n  repo: o/r\n", "retry_wait_s", "-1", "must be seconds >= 0"),
    ("github:\n  repo: o/r\n", "write_interval_s", "soon", "must be seconds >= 0"),
    ("github:\n  repo: o/r\n", "request_interval_s", "true", "must be seconds >= 0"),
    ("github:\n  repo: o/r\n", "delivery_retry_s", "0", "must be seconds > 0"),
    ("service:\n", "host_beat_s", "0", "must be seconds > 0"),
])
def test_a_pacing_interval_must_be_seconds(tmp_path: Path, section: str, key: str, value: str,
                                          problem: str) -> None:
    message = _load(tmp_path, "profile: demo\n" + BOX + section + f"  {key}: {value}\n")
    where = section.split(":", 1)[0]
    assert f"{where}.{key}: {problem}" in message, message
