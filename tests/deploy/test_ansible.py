"""The playbook: lint-clean, syntax-valid for every cluster, and a check-mode run against this machine
(connection local, nothing changed) for a bare-image cluster and a vendor-preinstalled one, showing the
install tasks run where the cluster's toggles are on and are skipped where they are off."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from pipeline.ops import load_ops_config

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
ANSIBLE = REPO / "ansible"
BIN = Path(sys.executable).parent
PLAYBOOK = BIN / "ansible-playbook"
INVENTORIES = sorted(p.name for p in (ANSIBLE / "inventories").iterdir() if (p / "hosts.yml").is_file())
SECRET_VARS = (
    "SLUICE_POSTGRES_PASSWORD",
    "SLUICE_REDIS_PASSWORD",
    "SLUICE_ADMIN_PASSWORD",
    "AIRFLOW_FERNET_KEY",
    "AIRFLOW_JWT_SECRET",
    "AIRFLOW_API_SECRET_KEY",
)
#: Every install task and the toggle that governs it.
INSTALL_TASKS = {
    "common : Install base packages": "install_base_packages",
    "common : Install container runtime": "install_container_runtime",
    "common : Install NVIDIA container toolkit": "install_nvidia_container_toolkit",
    "postgres : Install PostgreSQL": "install_postgres",
    "airflow : Install Redis": "install_redis",
    "sluice : Install uv": "install_uv",
}
#: One host per kind of node keeps the runs short: a control node and a GPU node.
CHECK_HOSTS = {
    "lab": ["ctl01.lab.sluice.internal", "gpu01.lab.sluice.internal"],
    "vendor_h100": ["login01.h100.vendor.example", "hgx-001.h100.vendor.example"],
}


@dataclass
class Run:
    returncode: int
    output: str
    events: list[dict]

    def results(self, task: str) -> dict[str, dict]:
        """The result of ``task`` per host (the task's full name, ``role : name``)."""
        return {e["host"]: e for e in self.events if e["task"] == task}


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "SLUICE_", "AIRFLOW"))}
    env.update(
        ANSIBLE_CONFIG=str(ANSIBLE / "ansible.cfg"),
        ANSIBLE_CALLBACK_PLUGINS=str(Path(__file__).parent / "callback_plugins"),
        ANSIBLE_CALLBACKS_ENABLED="sluice_events",
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_LOCAL_TEMP=extra.pop("ANSIBLE_LOCAL_TEMP"),
        PATH=f"{BIN}{os.pathsep}{env.get('PATH', '/usr/bin:/bin')}",
    )
    env.update(extra)
    return env


def _playbook(workdir: Path, cluster: str, *args: str, secret_values: dict[str, str]) -> Run:
    """Run site.yml against ``cluster``'s inventory with every host on this machine, in check mode."""
    workdir.mkdir(parents=True, exist_ok=True)
    events = workdir / "events.jsonl"
    slurm_conf = workdir / "slurm.conf"
    slurm_conf.write_text(f"ClusterName={cluster}\nSlurmctldHost=ctl01\n")
    argv = [
        str(PLAYBOOK),
        "-i",
        f"inventories/{cluster}/hosts.yml",
        "site.yml",
        "--check",
        "--diff",
        "--limit",
        ",".join(CHECK_HOSTS[cluster]),
        # Every inventory host is this machine; its system Python has the apt bindings check mode needs.
        "-e",
        "ansible_connection=local",
        "-e",
        "ansible_python_interpreter=/usr/bin/python3",
        # This machine has no systemd; a real node must (common asserts it).
        "-e",
        "sluice_manage_services=false",
        "-e",
        f"preflight_slurm_conf={slurm_conf}",
        "-e",
        f"sluice_source_archive={workdir / 'sluice-src.tar.gz'}",
        *args,
    ]
    env = _env(SLUICE_ANSIBLE_EVENTS=str(events), ANSIBLE_LOCAL_TEMP=str(workdir / "tmp"), **secret_values)
    done = subprocess.run(
        argv, cwd=ANSIBLE, capture_output=True, text=True, env=env, timeout=600, check=False
    )
    lines = events.read_text().splitlines() if events.exists() else []
    return Run(done.returncode, done.stdout + done.stderr, [json.loads(line) for line in lines])


def _skip_without_apt_lists(run: Run) -> None:
    if "No package matching 'docker.io' is available" in run.output:
        pytest.skip("apt has no package lists on this machine (run `apt-get update` first)")


@pytest.fixture(scope="module")
def secret_values() -> dict[str, str]:
    return {name: f"sentinel-{secrets.token_hex(6)}" for name in SECRET_VARS}


def _lint() -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "ansible-lint"), "--offline", "--nocolor"],
        cwd=ANSIBLE,
        capture_output=True,
        text=True,
        env=_env(ANSIBLE_LOCAL_TEMP="/tmp"),
        timeout=600,
        check=False,
    )


@pytest.fixture(scope="module")
def background(
    tmp_path_factory: pytest.TempPathFactory, secret_values: dict[str, str]
) -> Iterator[dict[str, object]]:
    """The lint and the check-mode runs, started together: each mostly waits on Python start-ups."""
    base = tmp_path_factory.mktemp("ansible")
    jobs = {
        "lab": ("lab", ()),
        "vendor_h100": ("vendor_h100", ()),
        # One toggle switched off on the bare cluster, only the install tasks (--tags install).
        "lab_no_runtime": ("lab", ("--tags", "install", "-e", "install_container_runtime=false")),
    }
    with ThreadPoolExecutor(len(jobs) + 1) as pool:
        futures = {
            name: pool.submit(_playbook, base / name, cluster, *args, secret_values=secret_values)
            for name, (cluster, args) in jobs.items()
        }
        futures["lint"] = pool.submit(_lint)
        yield {name: future.result() for name, future in futures.items()}


@pytest.fixture(scope="module")
def runs(background: dict[str, object]) -> dict[str, Run]:
    return {name: run for name, run in background.items() if isinstance(run, Run)}


def test_ansible_lint_is_clean(background: dict[str, object]) -> None:
    done = background["lint"]
    assert isinstance(done, subprocess.CompletedProcess)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Profile 'production' was required, and it passed" in done.stdout + done.stderr


@pytest.mark.parametrize("cluster", INVENTORIES)
def test_syntax_check_every_inventory(cluster: str, tmp_path: Path) -> None:
    done = subprocess.run(
        [str(PLAYBOOK), "-i", f"inventories/{cluster}/hosts.yml", "site.yml", "--syntax-check"],
        cwd=ANSIBLE,
        capture_output=True,
        text=True,
        env=_env(ANSIBLE_LOCAL_TEMP=str(tmp_path)),
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_there_are_clusters_that_differ() -> None:
    assert len(INVENTORIES) >= 2
    toggles = {
        cluster: {
            key: value
            for key, value in yaml.safe_load(
                (ANSIBLE / "inventories" / cluster / "group_vars" / "all.yml").read_text()
            ).items()
            if key.startswith(("install_", "manage_"))
        }
        for cluster in INVENTORIES
    }
    assert toggles["lab"]["install_container_runtime"] is True
    assert toggles["vendor_h100"]["install_container_runtime"] is False
    assert toggles["lab"]["manage_slurm_conf"] and not toggles["vendor_h100"]["manage_slurm_conf"]


def test_bare_cluster_runs_its_install_tasks_in_check_mode(runs: dict[str, Run]) -> None:
    run = runs["lab"]
    _skip_without_apt_lists(run)
    assert run.returncode == 0, run.output[-3000:]
    ctl, gpu = CHECK_HOSTS["lab"]
    for task, toggle in INSTALL_TASKS.items():
        results = run.results(task)
        assert results, f"{task} did not run"
        for host, event in results.items():
            if task.startswith("common : Install NVIDIA") and host == ctl:
                # Only the GPU group turns this toggle on.
                assert event["result"].get("false_condition") == f"{toggle} | bool"
            else:
                assert event["status"] != "skipped", f"{task} skipped on {host}: {event['result']}"
    # The toolkit's repository is not added in check mode, so apt cannot know the package: tolerated there.
    assert run.results("common : Install NVIDIA container toolkit")[gpu]["status"] in {"ok", "ignored"}


def test_vendor_cluster_skips_the_install_tasks_it_switches_off(runs: dict[str, Run]) -> None:
    run = runs["vendor_h100"]
    assert run.returncode == 0, run.output[-3000:]
    skipped = set()
    for task, toggle in INSTALL_TASKS.items():
        for host, event in run.results(task).items():
            if toggle == "install_uv":  # the vendor's image has no uv: this one stays on
                assert event["status"] == "ok", host
                continue
            assert event["status"] == "skipped", f"{task} ran on {host}"
            assert event["result"]["false_condition"] == f"{toggle} | bool"
            skipped.add(task)
    # Managed Postgres and Redis: no host of the cluster is in those groups, so the tasks do not appear.
    assert skipped == {
        "common : Install base packages",
        "common : Install container runtime",
        "common : Install NVIDIA container toolkit",
    }
    assert not run.results("postgres : Install PostgreSQL") and not run.results("airflow : Install Redis")
    # The vendor owns slurm.conf: the play hands the lines over instead of editing it.
    [handover] = run.results("preflight : Tell the operator what to add to the vendor's slurm.conf").values()
    assert "HealthCheckProgram=/usr/local/sbin/sluice-healthcheck" in handover["result"]["msg"]
    assert not run.results("preflight : Make the preflight Slurm's HealthCheckProgram") or all(
        e["status"] == "skipped"
        for e in run.results("preflight : Make the preflight Slurm's HealthCheckProgram").values()
    )


def test_one_toggle_switches_exactly_its_task_off(runs: dict[str, Run]) -> None:
    run = runs["lab_no_runtime"]
    _skip_without_apt_lists(run)
    assert run.returncode == 0, run.output[-3000:]
    for event in run.results("common : Install container runtime").values():
        assert event["status"] == "skipped"
        assert event["result"]["false_condition"] == "install_container_runtime | bool"
    for event in run.results("common : Install base packages").values():
        assert event["status"] == "ok"
    # --tags install ran the install tasks and the inventory checks only.
    ran = {e["task"] for e in run.events if e["status"] != "skipped"}
    assert "sluice : Write the environment file of every Sluice, Airflow and Ray service" not in ran


def _rendered(run: Run, task: str, host: str) -> str:
    [diff] = [d for d in run.results(task)[host]["result"]["diff"] if "after" in d]
    return diff["after"]


@pytest.mark.parametrize(
    ("cluster", "host", "gpus", "model", "runtimes"),
    [
        ("lab", "gpu01.lab.sluice.internal", 4, "L40S", ("docker", "nvidia-container-toolkit")),
        ("vendor_h100", "hgx-001.h100.vendor.example", 8, "H100", ("enroot", "nvidia-container-toolkit")),
        ("vendor_h100", "login01.h100.vendor.example", 0, None, ("enroot",)),
    ],
)
def test_the_inventory_renders_a_valid_ops_config(
    runs: dict[str, Run],
    tmp_path: Path,
    cluster: str,
    host: str,
    gpus: int,
    model: str | None,
    runtimes: tuple,
) -> None:
    """What the preflight role writes to /etc/sluice/ops.yaml loads with `sluice ops`' own loader."""
    run = runs[cluster]
    _skip_without_apt_lists(run)
    path = tmp_path / "ops.yaml"
    path.write_text(_rendered(run, "preflight : Write the node's ops config", host))
    config = load_ops_config(path)
    assert config.preflight.expected_gpu_count == gpus
    assert config.preflight.expected_gpu_model == model
    assert tuple(config.preflight.container_runtimes) == runtimes
    if cluster == "vendor_h100":
        assert config.sweep.reservation_owners == ("slurmadmin", "slurm")


def test_the_health_check_is_wired_into_slurm_conf(runs: dict[str, Run]) -> None:
    run = runs["lab"]
    _skip_without_apt_lists(run)
    event = run.results("preflight : Make the preflight Slurm's HealthCheckProgram")[
        "gpu01.lab.sluice.internal"
    ]
    added = {
        item["item"]["key"]: item["diff"][0]["after"].splitlines()[-1] for item in event["result"]["results"]
    }
    assert added == {
        "HealthCheckProgram": "HealthCheckProgram=/usr/local/sbin/sluice-healthcheck",
        "HealthCheckInterval": "HealthCheckInterval=300",
        "HealthCheckNodeState": "HealthCheckNodeState=ANY,CYCLE",
    }
    program = _rendered(run, "preflight : Write the health-check program", "gpu01.lab.sluice.internal")
    assert "sluice ops preflight" in program and "--drain-on-fail" in program


def test_no_secret_reaches_the_run_output(runs: dict[str, Run], secret_values: dict[str, str]) -> None:
    for name, run in runs.items():
        # Fact gathering reports the controller's own environment here only because every host is this
        # machine (connection local); a remote node's facts never hold the controller's variables.
        shown = "\n".join(
            [run.output, *(json.dumps(e) for e in run.events if e["task"] != "Gathering Facts")]
        )
        for var, value in secret_values.items():
            assert value not in shown, f"{var} leaked into the output of the {name} run"


def test_the_playbook_stops_when_a_secret_is_missing(tmp_path: Path, secret_values: dict[str, str]) -> None:
    partial = {k: v for k, v in secret_values.items() if k != "SLUICE_REDIS_PASSWORD"}
    run = _playbook(tmp_path, "vendor_h100", secret_values=partial)
    assert run.returncode != 0
    assert "export SLUICE_REDIS_PASSWORD on the controller before running the playbook" in run.output
    assert not run.results("common : Install base packages")  # stopped before touching any host
