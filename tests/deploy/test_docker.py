"""The image and the compose stack: installed from the lock, secrets only from the environment, every
long-running service health-checked, and the compose file valid for Compose itself (when installed)."""

from __future__ import annotations

import re
import secrets
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DOCKER = REPO / "docker"
COMPOSE = DOCKER / "compose.yaml"
DOCKERFILE = DOCKER / "Dockerfile"

#: The variables the stack's secrets come from; the compose file must refuse to render without each.
SECRET_VARS = (
    "SLUICE_POSTGRES_PASSWORD",
    "SLUICE_REDIS_PASSWORD",
    "SLUICE_ADMIN_PASSWORD",
    "AIRFLOW_FERNET_KEY",
    "AIRFLOW_JWT_SECRET",
    "AIRFLOW_API_SECRET_KEY",
)
#: Environment keys that hold a secret: their value must be a required interpolation.
SECRET_KEY = re.compile(r"PASSWORD$|SECRET|FERNET|_KEY$|AUTH$")
#: Environment keys that hold a URL: a password in it must be a required interpolation.
URL_KEY = re.compile(r"_URL$|_CONN$|_BACKEND$")
#: A URL with a literal password: scheme://user:password@host.
LITERAL_URL_PASSWORD = re.compile(r"[a-z][a-z0-9+.-]*://[^\s/:@]*:(?!\$\{|\{\{)[^\s/@]+@")
#: The password of a URL, when it has one.
URL_PASSWORD = re.compile(r"://[^\s/:@]*:(\$\{[^}]+\}|[^\s/@]+)@")
REQUIRED = re.compile(r"^\$\{[A-Z0-9_]+:\?[^}]+\}$")


def _compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def _one_shots(services: dict) -> set[str]:
    """Services others wait on to *complete*: a health check has no meaning for them."""
    return {
        name
        for spec in services.values()
        for name, cond in (spec.get("depends_on") or {}).items()
        if isinstance(cond, dict) and cond.get("condition") == "service_completed_successfully"
    }


def test_the_stack_has_every_service_the_architecture_names() -> None:
    services = set(_compose()["services"])
    expected = {
        "postgres",
        "redis",
        "airflow-api-server",
        "airflow-scheduler",
        "airflow-dag-processor",
        "airflow-triggerer",
        "airflow-worker-cpu",
        "airflow-worker-gpu",
        "ray-head",
        "ray-worker",
    }
    assert expected <= services


def test_every_long_running_service_has_a_healthcheck_and_waits_on_health() -> None:
    services = _compose()["services"]
    one_shots = _one_shots(services)
    assert one_shots == {"airflow-init"}
    for name, spec in services.items():
        if name in one_shots:
            assert spec.get("restart") == "no", f"{name} is one-shot and must not restart"
            continue
        check = spec.get("healthcheck") or {}
        assert check.get("test") and not check.get("disable"), f"{name} has no healthcheck"
        for dependency, condition in (spec.get("depends_on") or {}).items():
            assert isinstance(condition, dict), f"{name} depends on {dependency} without a condition"
            wanted = "service_completed_successfully" if dependency in one_shots else "service_healthy"
            assert condition["condition"] == wanted, f"{name} -> {dependency}"


def test_each_celery_worker_serves_its_own_queues() -> None:
    services = _compose()["services"]
    queues = {}
    for name, spec in services.items():
        command = spec.get("command") or []
        if command[:3] == ["airflow", "celery", "worker"]:
            queues[name] = set(command[command.index("--queues") + 1].split(","))
    assert queues == {"airflow-worker-cpu": {"default", "cpu", "io", "db"}, "airflow-worker-gpu": {"gpu"}}
    gpu = services["airflow-worker-gpu"]
    assert gpu["profiles"] == ["gpu"]  # off unless asked for: it needs the NVIDIA runtime
    assert gpu["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == ["gpu"]


def test_secrets_come_only_from_the_environment() -> None:
    services = _compose()["services"]
    checked = 0
    for name, spec in services.items():
        for key, value in (spec.get("environment") or {}).items():
            where = f"{name}.{key}"
            if SECRET_KEY.search(key):
                checked += 1
                assert isinstance(value, str) and REQUIRED.match(value), f"{where} must be ${{VAR:?message}}"
            elif URL_KEY.search(key) and isinstance(value, str):
                password = URL_PASSWORD.search(value)
                if password:
                    checked += 1
                    assert REQUIRED.match(password.group(1)), (
                        f"{where} holds a password not from the environment"
                    )
    assert checked >= 10
    for var in SECRET_VARS:
        assert re.search(rf"\$\{{{var}:\?", COMPOSE.read_text()), f"{var} is not required"
    for path in [*DOCKER.rglob("*"), *(REPO / "ansible").rglob("*")]:
        if path.is_file():
            text = path.read_text(errors="replace")
            assert not LITERAL_URL_PASSWORD.search(text), f"{path.relative_to(REPO)} holds a URL password"


def _compose_tool() -> list[str] | None:
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    if shutil.which("docker"):
        probe = subprocess.run(["docker", "compose", "version"], capture_output=True, check=False)
        if probe.returncode == 0:
            return ["docker", "compose"]
    return None


@pytest.fixture(scope="module")
def compose_tool() -> list[str]:
    tool = _compose_tool()
    if tool is None:
        pytest.skip(
            "neither `docker compose` nor `docker-compose` is installed (apt-get install -y docker-compose)"
        )
    return tool


def test_compose_renders_with_secrets_from_the_environment(compose_tool: list[str]) -> None:
    values = {var: f"sentinel-{secrets.token_hex(8)}" for var in SECRET_VARS}
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", **values}
    args = [*compose_tool, "-f", str(COMPOSE), "--profile", "gpu", "config"]
    done = subprocess.run(args, capture_output=True, text=True, env=env, check=False)
    assert done.returncode == 0, done.stderr
    rendered = yaml.safe_load(done.stdout)
    postgres_env = rendered["services"]["postgres"]["environment"]
    assert postgres_env["POSTGRES_PASSWORD"] == values["SLUICE_POSTGRES_PASSWORD"]
    scheduler_env = rendered["services"]["airflow-scheduler"]["environment"]
    assert scheduler_env["AIRFLOW__CORE__FERNET_KEY"] == values["AIRFLOW_FERNET_KEY"]
    assert f":{values['SLUICE_REDIS_PASSWORD']}@redis:6379" in scheduler_env["AIRFLOW__CELERY__BROKER_URL"]
    assert "airflow-worker-gpu" in rendered["services"]


@pytest.mark.parametrize("missing", ["SLUICE_POSTGRES_PASSWORD", "AIRFLOW_JWT_SECRET"])
def test_compose_refuses_to_render_without_a_secret(compose_tool: list[str], missing: str) -> None:
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp"}
    env |= {var: "x" for var in SECRET_VARS if var != missing}
    done = subprocess.run(
        [*compose_tool, "-f", str(COMPOSE), "config"], capture_output=True, text=True, env=env, check=False
    )
    assert done.returncode != 0
    assert f"set {missing} in the environment" in done.stderr


# --- the image installs from the lock -----------------------------------------------------------------------


def _instructions(dockerfile: Path) -> list[tuple[str, str]]:
    """``(INSTRUCTION, arguments)`` pairs, continuation lines joined, comments dropped."""
    joined, out = "", []
    for line in dockerfile.read_text().splitlines():
        if not joined and (not line.strip() or line.lstrip().startswith("#")):
            continue
        joined += line.rstrip("\\").strip() + " "
        if not line.rstrip().endswith("\\"):
            word, _, rest = joined.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
            joined = ""
    return out


def _arg_defaults(instructions: list[tuple[str, str]]) -> dict[str, str]:
    defaults = {}
    for word, rest in instructions:
        if word == "ARG" and "=" in rest:
            key, _, value = rest.partition("=")
            defaults[key] = value.strip('"')
    return defaults


def _uv_syncs(instructions: list[tuple[str, str]]) -> list[list[str]]:
    """Every ``uv sync`` command of the RUN lines, ARG defaults expanded."""
    defaults = _arg_defaults(instructions)
    syncs = []
    for word, rest in instructions:
        if word != "RUN":
            continue
        expanded = re.sub(r"\$\{(\w+)\}", lambda m: defaults.get(m.group(1), m.group(0)), rest)
        for command in re.split(r"&&|;", expanded):
            argv = shlex.split(command)
            if argv[:2] == ["uv", "sync"]:
                syncs.append(argv)
    return syncs


def test_the_image_installs_from_the_lock_with_frozen() -> None:
    instructions = _instructions(DOCKERFILE)
    syncs = _uv_syncs(instructions)
    assert len(syncs) == 2, "dependencies first (cached layer), then the project"
    for argv in syncs:
        assert "--frozen" in argv and "--no-dev" in argv, argv
    # The lock is in the image before the first sync, and nothing is installed around it.
    copies = [
        i for i, (word, rest) in enumerate(instructions) if word == "COPY" and "uv.lock" in rest.split()
    ]
    first_sync = next(i for i, (word, rest) in enumerate(instructions) if word == "RUN" and "uv sync" in rest)
    assert copies and copies[0] < first_sync
    for word, rest in instructions:
        if word == "RUN":
            assert "uv pip install" not in rest and "uv add" not in rest
            for spec in re.findall(r"pip install (?:--\S+ )*(\S+)", rest):
                assert re.fullmatch(r'"?uv==\$\{UV_VERSION\}"?', spec), (
                    f"pip installs {spec} outside the lock"
                )


def test_the_lock_pins_what_the_image_runs() -> None:
    lock = tomllib.loads((REPO / "uv.lock").read_text())
    versions = {p["name"]: p.get("version") for p in lock["package"]}
    assert versions["apache-airflow"].startswith("3.")
    for name in ("apache-airflow-core", "apache-airflow-task-sdk", "ray", "psycopg2-binary", "psutil"):
        assert versions.get(name), f"{name} is not pinned in uv.lock"
    project = next(p for p in lock["package"] if p["name"] == "sluice")
    assert project["source"] == {"editable": "."}


def _declared_extras() -> set[str]:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    return set(pyproject["project"].get("optional-dependencies", {}))


def _image_extras() -> list[str]:
    argv = _uv_syncs(_instructions(DOCKERFILE))[0]
    return [argv[i + 1] for i, word in enumerate(argv) if word == "--extra"]


def _uv() -> list[str] | None:
    """uv by absolute path (the test runs it with a minimal PATH), or as a module of a Python that has it."""
    found = shutil.which("uv")
    if found:
        return [found]
    for python in (shutil.which("python3"), sys.executable):
        if python and subprocess.run([python, "-m", "uv", "--version"], capture_output=True).returncode == 0:
            return [python, "-m", "uv"]
    return None


def test_the_image_sync_resolves_offline_against_the_committed_lock(tmp_path: Path) -> None:
    """Run the Dockerfile's own ``uv sync`` (dry run, offline) on a copy of pyproject.toml and uv.lock."""
    assert set(_image_extras()) <= _declared_extras(), "the image asks for an extra pyproject.toml lacks"
    uv = _uv()
    if uv is None:
        pytest.skip("uv is not installed (the Makefile installs it with pip)")
    for name in ("pyproject.toml", "uv.lock", "README.md"):
        shutil.copy(REPO / name, tmp_path / name)
    for argv in _uv_syncs(_instructions(DOCKERFILE)):
        done = subprocess.run(
            [*uv, *argv[1:], "--dry-run", "--offline"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            env={"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(tmp_path), "UV_NO_CACHE": "1"},
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert "apache-airflow-providers-celery" in done.stderr + done.stdout
