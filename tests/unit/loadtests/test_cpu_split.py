"""Where a side's CPU went (loadtests.bench.TreeCpu.split)."""

from __future__ import annotations

import subprocess
import sys

from loadtests.bench import TreeCpu, cpu_part, jvm_thread_part


def test_processes_are_told_apart_by_their_command_line() -> None:
    python = "/venv/bin/python"
    assert cpu_part([python, "-m", "loadtests.side", "{}"], root=True) == "python: driver"
    assert cpu_part(["/usr/lib/jvm/x/bin/java", "-cp", "jars"], root=False) == "jvm"
    shell = ["bash", "spark-class", "--conf", "spark.executorEnv.PYSPARK_PYTHON=" + python]
    assert cpu_part(shell, root=False) == "other"
    worker = [python, "-m", "app.runtime.worker_daemon", "pyspark.worker"]
    assert cpu_part(worker, root=False) == "python: workers"
    planner = [python, "-m", "pyspark.daemon", "pyspark.sql.worker.create_data_source"]
    assert cpu_part(planner, root=False) == "python: planners"


def test_jvm_threads_are_told_apart_by_their_linux_names() -> None:
    assert jvm_thread_part("Executor task l") == "jvm: tasks"
    assert jvm_thread_part("C2 CompilerThre") == "jvm: JIT"
    assert jvm_thread_part("C1 CompilerThre") == "jvm: JIT"
    assert jvm_thread_part("GC Thread#0") == "jvm: GC"
    assert jvm_thread_part("G1 Conc#0") == "jvm: GC"
    assert jvm_thread_part("stream executio") == "jvm: other"


def test_the_split_adds_up_to_the_total() -> None:
    # A tree of its own (a parent and its busy child): the test process's tree may hold
    # other tests' processes (a session's JVM, say).
    busy = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass"
    run_busy = f"import subprocess, sys\nsubprocess.run([sys.executable, '-c', {busy!r}])"
    parent = subprocess.Popen([sys.executable, "-c", run_busy])
    cpu = TreeCpu(parent.pid, interval=0.05)
    parent.wait(timeout=60)
    total = cpu.stop()
    split = cpu.split()
    assert set(split) <= {"python: driver", "python: planners"}, split
    assert total > 0.1, (split, total)
    assert abs(sum(split.values()) - total) < 0.2, (split, total)
