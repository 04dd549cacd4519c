"""Check out one side by full SHA, build it, and keep its artifacts where samples verify them."""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from ..contract.integrity import file_sha256
from ..contract.job import Job
from ..sandbox import proc, safe_io

ARTIFACT_CAP = 16 << 30  # bytes of one artifact
# The harness copy this module belongs to: a build may run a harness script (`{harness}/...`),
# since an isolated Python (-I) finds no `engine` package on its path in the tree's cwd.
HARNESS_ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Built:
    side: str
    sha: str
    ok: bool
    duration_s: float
    cached: bool
    artifact_dir: Path
    hashes: dict[str, str] = field(default_factory=dict)
    failure: str = ""  # "", "checkout", "build", "timeout", "artifacts", "exceeded"
    log: Path | None = None
    exceeded: str = ""  # with failure "exceeded": the cap it went past (engine/sandbox/caps.py)
    saved_s: float = 0.0  # a cache hit: how long the original build took (box time saved)

    def facts(self) -> dict[str, object]:
        return {
            "sha": self.sha,
            "ok": self.ok,
            "duration_s": round(self.duration_s, 3),
            "cached": self.cached,
            "artifacts": self.hashes,
            "failure": self.failure,
            "saved_s": round(self.saved_s, 3),
        }


def verify(built: Built) -> None:
    """Refuse to run a sample from an artifact that changed since the build."""
    for rel, expected in built.hashes.items():
        if file_sha256(built.artifact_dir / rel) != expected:
            raise RuntimeError(f"artifact {rel} of {built.side} changed after its build")


def build_side(job: Job, side: str, sha: str, jobdir: Path) -> Built:
    """Clone, check out `sha`, run the profile's build, copy and hash the artifacts."""
    artifact_dir = jobdir / "artifacts" / side
    log = jobdir / "logs" / f"build-{side}.log"
    cached = _from_cache(job, sha, artifact_dir)
    if cached is not None:
        hashes, original_s = cached
        return Built(side, sha, True, 0.0, True, artifact_dir, hashes, log=None,
                     saved_s=original_s)
    tree = jobdir / "trees" / side
    got = _checkout(job.repo, sha, tree, jobdir / "logs" / f"checkout-{side}.log")
    if not got.ok:
        return Built(side, sha, False, got.wall_s, False, artifact_dir, log=log,
                     failure="exceeded" if got.exceeded else "checkout", exceeded=got.exceeded)
    argv = [a.format(python=_python(), tree=str(tree), harness=str(HARNESS_ROOT))
            for a in job.build_argv]
    done = proc.run(argv, cwd=tree, timeout_s=job.build_timeout_s, log=log, env=job.env)
    if not done.ok:
        failure = "exceeded" if done.exceeded else "timeout" if done.timed_out else "build"
        return Built(side, sha, False, done.wall_s, False, artifact_dir, failure=failure, log=log,
                     exceeded=done.exceeded)
    try:
        hashes = _collect(tree, job.artifacts, artifact_dir)
    except FileNotFoundError as exc:
        log.write_text(log.read_text() + f"\nmissing artifact: {exc}\n")
        return Built(side, sha, False, done.wall_s, False, artifact_dir, failure="artifacts", log=log)
    _to_cache(job, sha, artifact_dir, hashes, done.wall_s)
    return Built(side, sha, True, done.wall_s, False, artifact_dir, hashes, log=log)


def _python() -> str:
    import sys

    return sys.executable


def _checkout(repo: str, sha: str, tree: Path, log: Path) -> proc.Finished:
    tree.parent.mkdir(parents=True, exist_ok=True)
    if tree.exists():
        shutil.rmtree(tree)
    cloned = proc.run(
        ["git", "clone", "--quiet", "--no-checkout", repo, str(tree)],
        cwd=tree.parent,
        timeout_s=600,
        log=log,
    )
    if not cloned.ok:
        return cloned
    return proc.run(
        ["git", "-c", "advice.detachedHead=false", "checkout", "--quiet", "--detach", sha],
        cwd=tree,
        timeout_s=300,
        log=log.with_suffix(".checkout.log"),
    )


def _collect(tree: Path, artifacts: list[str], dest: Path) -> dict[str, str]:
    if dest.exists():
        shutil.rmtree(dest)
    hashes = {}
    for rel in artifacts:  # the tree is the sandbox's: never follow a link it planted there
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        try:
            safe_io.copy_beneath(tree, rel, dest / rel, ARTIFACT_CAP)
        except safe_io.Untrusted as exc:
            raise FileNotFoundError(f"{rel} ({exc})") from exc
        hashes[rel] = file_sha256(dest / rel)
    return hashes


def _cache_key(job: Job, sha: str) -> str:
    recipe = json.dumps([sha, job.build_argv, job.artifacts, sorted(job.env.items())])
    return hashlib.sha256(recipe.encode()).hexdigest()[:32]


def _from_cache(job: Job, sha: str, dest: Path) -> tuple[dict[str, str], float] | None:
    """A build of the same SHA and recipe, reused only if every artifact still hashes right;
    returns the hashes and the original build's duration (0 for a manifest without one)."""
    if not job.cache_dir:
        return None
    entry = Path(job.cache_dir) / "builds" / _cache_key(job, sha)
    manifest = entry / "manifest.json"
    if not manifest.is_file():
        return None
    doc = json.loads(manifest.read_text())
    versioned = isinstance(doc.get("hashes"), dict)  # the first manifests held only hashes
    hashes: dict[str, str] = doc["hashes"] if versioned else doc
    original_s = float(doc.get("duration_s", 0.0)) if versioned else 0.0
    if any(file_sha256(entry / "files" / rel) != h for rel, h in hashes.items()):
        return None
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(entry / "files", dest)
    return hashes, original_s


def _to_cache(job: Job, sha: str, src: Path, hashes: dict[str, str], duration_s: float) -> None:
    if not job.cache_dir:
        return
    entry = Path(job.cache_dir) / "builds" / _cache_key(job, sha)
    tmp = entry.with_name(entry.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    shutil.copytree(src, tmp / "files")
    (tmp / "manifest.json").write_text(json.dumps({"hashes": hashes,
                                                   "duration_s": round(duration_s, 3)},
                                                  sort_keys=True))
    if entry.exists():
        shutil.rmtree(entry)
    tmp.rename(entry)
