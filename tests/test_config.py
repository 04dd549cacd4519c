"""The configuration file: the shipped example parses; every error names file, line and key."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalbot.config.errors import ConfigError
from evalbot.config.settings import REPO_ROOT, load_config

GOOD_BOX = """
  - name: a
    kind: local
    workdir: /tmp/w
    repo: /tmp/r
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "evalbot.yaml"
    path.write_text(text)
    return path


def test_example_config_parses() -> None:
    config = load_config(REPO_ROOT / "evalbot.example.yaml")
    assert config.profile == "sparkinfer"
    assert config.github is not None and config.github.repo == "example-org/example-engine"
    box = config.boxes[0]
    assert (box.kind, box.port, box.labels) == ("ssh", 22, ("rtx5090", "sm_120"))


def test_minimal_config_gets_defaults(tmp_path: Path) -> None:
    config = load_config(_write(tmp_path, "profile: demo\nboxes:" + GOOD_BOX))
    assert config.policy == "default"
    assert config.store == tmp_path / "evalbot.sqlite3"
    assert config.github is None


@pytest.mark.parametrize(
    ("text", "line", "where", "problem"),
    [
        ("profile: demo\nboxes:" + GOOD_BOX + "colour: red\n", 7, "colour", "unknown key"),
        ("boxes:" + GOOD_BOX, 1, "profile", "required key is missing"),
        ("profile: 3\nboxes:" + GOOD_BOX, 1, "profile", "expected str"),
        ("profile: demo\nboxes:" + GOOD_BOX + "    port: 99999\n", 7, "boxes[0].port",
         "must be a port number"),
        ("profile: demo\nboxes:\n  - name: a\n    kind: ssh\n    workdir: /w\n", 3,
         "boxes[0].host", "required key is missing"),
        ("profile: demo\nboxes:\n  - name: a\n    kind: ftp\n    workdir: /w\n", 4,
         "boxes[0].kind", "'ftp' is not one of local, ssh"),
        ("profile: demo\nboxes: []\n", 2, "boxes", "at least one box"),
        ("profile: demo\ngithub:\n  repo: nope\nboxes:" + GOOD_BOX, 3, "github.repo",
         "is not owner/name"),
        ("profile: demo\nboxes:" + GOOD_BOX + "    trusted: 'yes'\n", 7, "boxes[0].trusted",
         "expected bool"),
        ("profile: [unclosed\n", None, "", "not valid YAML"),
    ],
)
def test_errors_name_line_and_key(tmp_path: Path, text: str, line: int | None, where: str,
                                  problem: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    message = str(err.value)
    assert message.startswith(str(path))
    assert problem in message
    if line is not None:
        assert f"{path}:{line}: {where}:" in message


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "absent.yaml")


def test_secret_comes_from_the_environment_only(tmp_path: Path, monkeypatch) -> None:
    config = load_config(_write(tmp_path, "profile: demo\nboxes:" + GOOD_BOX))
    monkeypatch.delenv("EVALBOT_TEST_SECRET", raising=False)
    with pytest.raises(ConfigError, match="EVALBOT_TEST_SECRET"):
        config.secret("EVALBOT_TEST_SECRET")
    monkeypatch.setenv("EVALBOT_TEST_SECRET", "s3cret")
    assert config.secret("EVALBOT_TEST_SECRET") == "s3cret"
    assert "s3cret" not in repr(config)


def test_a_local_box_path_is_relative_to_the_config_file(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir("/")  # the bot's working directory is not the config's
    config = load_config(_write(tmp_path, "profile: demo\nboxes:\n  - {name: a, kind: local, "
                                          "workdir: box, models_dir: box/models}\n"))
    box = config.boxes[0]
    assert (box.workdir, box.models_dir) == (str(tmp_path / "box"), str(tmp_path / "box/models"))


@pytest.mark.parametrize("workdir, problem", [("box", "must be an absolute path on the box"),
                                              ("~/box", "`~` is not expanded on the box")])
def test_an_ssh_box_path_must_be_absolute(tmp_path: Path, workdir: str, problem: str) -> None:
    path = _write(tmp_path, "profile: demo\nboxes:\n  - {name: a, kind: ssh, host: h, user: u, "
                            f"key_file: k, known_hosts: n, workdir: '{workdir}'}}\n")
    with pytest.raises(ConfigError, match=problem) as err:
        load_config(path)
    assert f"{path}:3: boxes[0].workdir:" in str(err.value)


def test_the_harness_arrives_intact_under_a_relative_workdir(tmp_path: Path, monkeypatch) -> None:
    """The guide's `workdir: box`: the harness's hash is checked from inside the job directory,
    so a path relative to the bot's directory named nothing there ("does not match ours")."""
    import sys

    from evalbot.evaluation.jobspec import make_job
    from evalbot.evaluation.pipeline import prepare
    from evalbot.evaluation.profile import load_profile
    from evalbot.grading.policy import load_labels
    from evalbot.service.pool import open_box

    monkeypatch.chdir(tmp_path)
    path = _write(tmp_path, f"profile: demo\nboxes:\n  - {{name: a, kind: local, workdir: box, "
                            f"python: {sys.executable}}}\n")
    config = load_config(path)
    [box_config] = config.boxes
    job = make_job(load_profile("demo"), load_labels(config.labels_file).policy("default"),
                   box_config, "a" * 40, "b" * 40)
    box = open_box(box_config)
    try:
        jobdir = prepare(box, box_config, job)
    finally:
        box.close()
    assert (Path(str(jobdir)) / "job.json").is_file()
    assert str(jobdir).startswith(str(tmp_path / "box"))


def test_a_one_word_relative_path_is_not_redacted_but_host_and_paths_are() -> None:
    from evalbot.config.redact import MASK, for_boxes
    from evalbot.config.settings import BoxConfig

    redact = for_boxes([BoxConfig(name="local", kind="ssh", workdir="box", repo="/srv/e.git",
                                  host="gpu-a.internal.example")])
    assert redact("box local: reachable") == "box local: reachable"
    assert redact("cloned /srv/e.git on gpu-a.internal.example") == f"cloned {MASK} on {MASK}"
