"""Loads the CPU stand-ins into every Python process of a real SGLang server in the test bed
(``python -m sglang.launch_server`` and the scheduler / detokenizer processes it spawns), when
``KVCTL_CPU_STAND_INS=server`` (set by kvctl_testbed.server, never by the patch series).

Python imports ``sitecustomize`` at startup from ``sys.path``; python/tests/stand_ins is first on
PYTHONPATH there, so this file runs before SGLang is imported. It does not import SGLang itself:
``sgl_kernel`` is served by a finder (stand_ins/sgl_kernel_cpu), and the HiCache host-pool pieces
of ``cpu_cuda`` (unpinned host staging pages, the test bed's host-memory reserve) are installed right after
``sglang.srt.mem_cache.pool_host.mha`` is first imported.
Without the variable it does nothing (the harness and pytest install ``cpu_cuda`` themselves).
"""
import os

if os.environ.get("KVCTL_CPU_STAND_INS") == "server":
    import importlib.abc
    import sys

    import sgl_kernel_cpu

    sgl_kernel_cpu.install()

    class _AfterImport(importlib.abc.MetaPathFinder):
        """Runs cpu_cuda.install() once pool_host.mha has been executed."""

        target = "sglang.srt.mem_cache.pool_host.mha"

        def find_spec(self, fullname, path=None, target=None):
            if fullname != self.target:
                return None
            sys.meta_path.remove(self)
            from importlib.util import find_spec

            spec = find_spec(fullname)
            if spec is None or spec.loader is None:
                return spec
            loader = spec.loader
            exec_module = loader.exec_module

            def exec_then_install(module):
                exec_module(module)
                import cpu_cuda

                cpu_cuda.install()
                cpu_cuda.install_unpinned_host_pages()
                cpu_cuda.install_host_memory_reserve()

            loader.exec_module = exec_then_install
            return spec

    sys.meta_path.insert(0, _AfterImport())

    if os.environ.get("COVERAGE_PROCESS_START"):
        # Test bed only (hunk coverage): SGLang ends its processes with SIGKILL, so no exit
        # handler would save coverage data. SIGUSR2 makes this process save it now and leave
        # a "saved-<pid>" marker beside it; kvctl_testbed.server.RealServer.stop() sends it to
        # every process of the server before stopping them.
        import signal

        def _save_coverage(*_a):
            import coverage

            cov = coverage.Coverage.current()
            if cov is not None:
                cov.save()  # and keep measuring: a process that exits normally saves again at exit
                data_file = cov.config.data_file
            else:  # not measured: say so all the same, nobody should wait for it
                import configparser

                cp = configparser.ConfigParser()
                cp.read(os.environ["COVERAGE_PROCESS_START"])
                data_file = cp.get("run", "data_file", fallback=".coverage")
            marker = os.path.join(os.path.dirname(os.path.abspath(data_file)), f"saved-{os.getpid()}")
            with open(marker, "w") as f:
                f.write("saved\n")

        signal.signal(signal.SIGUSR2, _save_coverage)

if os.environ.get("COVERAGE_PROCESS_START"):
    # Test bed only (hunk coverage per tree core): the lines this process runs are labelled with
    # the tree core SGLang builds in it (core_context.py).
    import core_context

    core_context.install()

if os.environ.get("KVCTL_CPU_STAND_INS") == "server" and os.environ.get("KVCTL_DYNAMO_STAND_INS") == "1":
    # Under dynamo.sglang only (set by the Dynamo test bed): Dynamo's Qwen video routing imports
    # SGLang's qwen_vl processor, whose model module calls a CPU kernel op of sgl_kernel's CPU build
    # while it loads; Dynamo skips that routing on an ImportError, which this None entry raises.
    import sys

    sys.modules.setdefault("sglang.srt.multimodal.processors.qwen_vl", None)
