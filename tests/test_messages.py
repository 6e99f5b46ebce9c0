"""The message catalogue (dsdoctor/messages): mined from the libraries' own source, and how explain names a message
no rule knows by its origin (LOG809), or says it cannot name a failure (LOG810) rather than "no failure"."""

import json
import textwrap
from pathlib import Path

import pytest

from dsdoctor.checks.logs import explain
from dsdoctor.messages import catalogue
from dsdoctor.messages.generate import SCOPE, installed, mine_source
from dsdoctor.messages.mine import HOLE, mine_cpp, mine_nccl, mine_python

CATALOGUES = Path(catalogue.__file__).parent


def test_python_messages_become_templates(tmp_path):
    pkg = tmp_path / "lib"
    pkg.mkdir()
    (pkg / "mod.py").write_text(textwrap.dedent('''
        import logging, warnings
        logger = logging.getLogger(__name__)
        class Engine:
            def step(self, stage, n):
                assert stage in (1, 2), f"ZeRO stage {stage} is not supported by the engine"
                if n < 0:
                    raise ValueError("micro batch %d must be positive, got %s" % (n, n))
                logger.warning("overflow at step {} of {}: skipping".format(n, stage))
                warnings.warn("the legacy key cpu_offload is " + "deprecated", FutureWarning)
                print("training finished")  # no failure word: not kept
                raise RuntimeError(msg)  # nothing literal: dynamic
    '''))
    found, dynamic, files = mine_python(pkg, "lib")
    got = {(t.kind, t.exception, t.function, tuple(t.parts)) for t in found}
    assert got == {
        ("assert", "AssertionError", "Engine.step", ("ZeRO stage ", HOLE, " is not supported by the engine")),
        ("raise", "ValueError", "Engine.step", ("micro batch ", HOLE, " must be positive, got ", HOLE)),
        ("log", "", "Engine.step", ("overflow at step ", HOLE, " of ", HOLE, ": skipping")),
        ("warn", "FutureWarning", "Engine.step", ("the legacy key cpu_offload is deprecated",)),
    }
    assert dynamic == 1 and files == 1


def test_nccl_format_strings_become_templates(tmp_path):
    (tmp_path / "init.cc").write_text('static int f() {\n  WARN("Duplicate GPU detected : rank %d and rank %d both on '
                                      'CUDA device %lx", a, b, c);\n  INFO(NCCL_INIT|NCCL_NET, "Using network %s", n);'
                                      '\n  TRACE(NCCL_ALL, "debug %d", x);\n}\n')
    found, _, _ = mine_nccl(tmp_path)
    assert [(t.kind, t.line, t.parts) for t in found] == [  # TRACE is debugging output: not kept
        ("nccl-warn", 2, ["Duplicate GPU detected : rank ", HOLE, " and rank ", HOLE, " both on CUDA device ", HOLE]),
        ("nccl-info", 3, ["Using network ", HOLE])]


def test_cpp_checks_become_templates_without_their_condition(tmp_path):
    """DeepSpeed's ops raise into Python from C++ (csrc/): TORCH_CHECK's condition is no part of its message, its
    other arguments are c10::str's pieces; a thrown std::runtime_error's ``+``-joined std::string has placeholders; a
    check too short to name a line (``"Size mismatch"``) is not kept."""
    (tmp_path / "adam").mkdir()
    (tmp_path / "adam" / "apply.cuh").write_text(
        'void f() {\n  TORCH_CHECK(d.type() == at::kCUDA, "expected input to be on cuda");\n'
        '  TORCH_CHECK(a.size() == b.size(), "Size mismatch");\n'
        '  TORCH_CHECK(n > 0, "chunk size ", n, " must be positive, got (", m, ")");\n'
        '  if (!ok) throw std::runtime_error("Unable to open file " + path + " for reading");\n'
        '  throw std::invalid_argument("the parameter dtype is not supported here");\n}\n')
    found, dynamic, files = mine_cpp(tmp_path, "deepspeed", "ops/csrc/")
    assert [(t.file, t.line, t.exception, t.parts) for t in found] == [
        ("ops/csrc/adam/apply.cuh", 2, "RuntimeError", ["expected input to be on cuda"]),
        ("ops/csrc/adam/apply.cuh", 4, "RuntimeError", ["chunk size ", HOLE, " must be positive, got (", HOLE, ")"]),
        ("ops/csrc/adam/apply.cuh", 5, "RuntimeError", ["Unable to open file ", HOLE, " for reading"]),
        ("ops/csrc/adam/apply.cuh", 6, "ValueError", ["the parameter dtype is not supported here"])]
    assert dynamic == 1 and files == 1


def test_the_commands_a_package_runs_become_templates(tmp_path):
    """A subprocess call's command (a list joined by spaces, an f-string, a name assigned before it, shlex.split of
    a string built with +=) is a ``command`` template: what ``Command '...' returned non-zero exit status N`` names."""
    (tmp_path / "runner.py").write_text(textwrap.dedent('''
        import shlex, subprocess
        def main(host, port):
            hostname_cmd = [f"ssh {host} hostname -I"]
            subprocess.check_output(hostname_cmd)
            cmd = "ssh -p " + str(port)
            cmd += f" {host} nvidia-smi -L"
            subprocess.run(shlex.split(cmd))
            subprocess.check_call(["ninja", "-v", *flags])
            subprocess.run(x)
    '''))
    found, _, _ = mine_python(tmp_path, "pkg")
    assert [(t.kind, t.parts) for t in found if t.kind == "command"] == [
        ("command", ["ssh ", HOLE, " hostname -I"]), ("command", ["ssh -p ", HOLE, " ", HOLE, " nvidia-smi -L"]),
        ("command", ["ninja -v ", HOLE])]  # subprocess.run(x): nothing known of x


def test_a_failed_command_is_named_by_the_package_that_runs_it():
    found = catalogue.lookup("subprocess.CalledProcessError: Command '['ssh worker-1 hostname -I']' returned non-zero "
                             "exit status 255.")
    assert found.whole and found.entry.kind == "command"
    assert (found.entry.package, found.entry.file) == ("deepspeed", "launcher/runner.py")
    assert "ran this command" in found.entry.origin()
    assert catalogue.command_lookup("Command '['my-own-tool', '--x']' returned non-zero exit status 1.") is None


def test_a_template_a_rules_documentation_quotes_is_that_rules():
    """DS123's documentation quotes DeepSpeed's "You are using an untested ZeRO Optimizer. Please add <...>": the
    catalogue's template maps to DS123 where no signature names it, and explain names the assertion DS123 with
    DeepSpeed's file as origin. A piece two rules quote, or one that another rule's quote holds, maps to neither."""
    from dsdoctor.messages.coverage import FILL, quoted_messages, rule_of

    found = catalogue.lookup('AssertionError: You are using an untested ZeRO Optimizer. Please add '
                             '<"zero_allow_untested_optimizer": true> in the configuration file to use it.')
    assert rule_of("".join(FILL if p is None else p for p in found.entry.parts)) == "DS123"
    findings, result = explain('Traceback (most recent call last):\n  File "/opt/venv/lib/python3.10/site-packages/'
                               'deepspeed/runtime/engine.py", line 1190, in _do_optimizer_sanity_check\n'
                               '    assert self.zero_allow_untested_optimizer(), \\\n'
                               'AssertionError: You are using an untested ZeRO Optimizer. Please add '
                               '<"zero_allow_untested_optimizer": true> in the configuration file to use it.\n')
    assert findings[0].id == "DS123" and result["origin"]["file"] == "runtime/engine.py"
    quoted = quoted_messages()
    assert not any("unexpected keyword argument" in piece for piece in quoted)  # DS118's and DS126's overlap
    assert not any("Current loss scale already at minimum" in piece for piece in quoted)  # DS113 and DS114 both


def test_deepspeeds_cpp_ops_messages_are_in_its_catalogue_for_every_version_mined():
    found = catalogue.lookup("RuntimeError: expected input to be on cuda")
    assert found.whole and found.entry.package == "deepspeed"
    assert found.entry.file == "ops/csrc/adam/multi_tensor_apply.cuh"
    assert found.entry.version_span() == "every version mined (0.9.5-0.19.8)"


def test_a_line_that_ends_inside_a_message_after_a_value_is_that_message():
    """A log (or a terminal's wrap) cuts transformers' "Error no file named {}, {}, {}, {} or {} found in directory
    {}." after its values: the parts before the cut are whole, the last one begun; a line holding only the first
    piece and a value is too little."""
    cut = catalogue.lookup("OSError: Error no file named pytorch_model.bin, model.safetensors, tf_model.h5, "
                           "model.ckpt.index or flax_model.msgpack found")
    assert cut.whole and (cut.entry.package, cut.entry.file) == ("transformers", "modeling_utils.py")
    assert not catalogue.lookup("OSError: Error no file named pytorch_model.bin").whole


@pytest.mark.parametrize("package", sorted(SCOPE))
def test_the_installed_version_has_a_catalogue_that_its_source_reproduces(package):
    """Each installed package's version is in its catalogue (a new release needs `python -m
    dsdoctor.messages.generate`), and mining the installed source again gives that version's templates exactly."""
    root, version = installed(package)
    data = json.loads((CATALOGUES / f"{package}.json").read_text())
    assert version in data["versions"], f"run python -m dsdoctor.messages.generate for {package} {version}"
    templates, _, _ = mine_source(package, root)
    mined = {(t.kind, t.exception, json.dumps(t.parts)) for t in templates}
    shipped = {(t["kind"], t.get("exception", ""), json.dumps(t["parts"])) for t in data["templates"]
               if version in t["versions"]}
    assert mined == shipped and len(mined) > 100


def test_catalogues_span_the_versions_users_run():
    """DeepSpeed from 0.9 to today, transformers 4.3x and 5.x, NCCL as torch 2.1-2.5 ships it (2.18, 2.21)."""
    versions = catalogue.catalogue_versions()
    assert {"0.9.5", "0.12.6", "0.14.4", "0.16.9", "0.19.8"} <= set(versions["deepspeed"])
    assert {"4.38.2", "4.46.3"} <= set(versions["transformers"]) and any(v.startswith("5.")
                                                                          for v in versions["transformers"])
    assert {"2.18.6", "2.21.5"} <= set(versions["nccl"])


@pytest.mark.parametrize("line,package,where,span", [
    ("AssertionError: zero stage 2 requires an optimizer", "deepspeed", "runtime/engine.py",
     "every version mined (0.9.5-0.19.8)"),
    ("misc/init.cc:735 NCCL WARN Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1000", "nccl",
     "init.cc", "2.18.6-2.26.6"),
    ("ValueError: Please specify `target_modules` or `target_parameters`in `peft_config`", "peft",
     "tuners/lora/model.py", "0.21.2"),
])
def test_a_line_is_found_with_its_origin(line, package, where, span):
    found = catalogue.lookup(line)
    assert found.whole and found.entry.package == package and found.entry.file.endswith(where)
    assert found.entry.version_span() == span


def test_a_wrapped_or_unknown_line_is_not_taken_for_a_message():
    assert catalogue.lookup("step 10 loss 1.234") is None
    assert catalogue.lookup("zero stage 2 requires") is None  # shorter than the message's longest piece


TRACEBACK = "Traceback (most recent call last):\n  File \"/work/train.py\", line 9, in <module>\n    main()\n"


def test_explain_names_a_library_error_no_rule_knows_by_its_origin():
    """peft's refusal of a LoraConfig without target_modules (round 12's GLM-4 point on the H200): no signature names
    it, the catalogue says whose it is."""
    log = TRACEBACK + "ValueError: Please specify `target_modules` or `target_parameters`in `peft_config`\n"
    findings, _ = explain(log)
    assert findings[0].id == "LOG809" and findings[0].severity == "error"
    assert "peft raised this (ValueError) in tuners/lora/model.py (LoraModel._prepare_adapter_config)" in \
        findings[0].evidence


def test_a_failure_nothing_can_name_is_never_a_clean_log():
    tail = "  File \"/work/x.py\", line 3, in f\n    g()\nRuntimeError: something no library prints\n" \
           "[2024-06-01] ERROR: the job failed\n"
    findings, _ = explain("[rank9999999999999999999999]: " + tail.replace("\n", "\n[rank9999999999999999999999]: "))
    assert findings[0].id in ("LOG805", "LOG810")
    findings, _ = explain("loading data\nFATAL: job aborted by the scheduler\n")
    assert findings[0].id == "LOG810" and findings[0].severity == "error" and "FATAL" in findings[0].evidence
    findings, _ = explain("loading data\nstep 1 loss 2.0\n")
    assert findings[0].id == "LOG800"


def test_a_message_held_in_a_variable_is_the_string_assigned_to_it(tmp_path):
    """DeepSpeed's engine builds its ZeRO-Offload client-optimizer error in ``msg`` and raises ``msg``: the
    template is that string (the last assigned in the function, ``+=`` appended, or a module constant)."""
    pkg = tmp_path / "lib"
    pkg.mkdir()
    (pkg / "mod.py").write_text(textwrap.dedent('''
        ERR = "the module-level message about the broken optimizer"
        def f(opt):
            msg = f"You are using ZeRO-Offload with a client provided optimizer ({type(opt)}) which is slow"
            raise RuntimeError(msg)
        def g():
            raise ValueError(ERR)
        def h(x):
            msg = "first part of the long message; "
            msg += f"then {x} the second part"
            logger.warning(msg)
        def k(msg):
            raise ValueError(msg)  # an argument: dynamic
    '''))
    found, dynamic, _ = mine_python(pkg, "lib")
    assert [(t.function, t.parts) for t in found] == [
        ("f", ["You are using ZeRO-Offload with a client provided optimizer (", HOLE, ") which is slow"]),
        ("g", ["the module-level message about the broken optimizer"]),
        ("h", ["first part of the long message; then ", HOLE, " the second part"])]
    assert dynamic == 1


def test_coverage_maps_templates_to_the_rules_of_explains_signatures():
    """The coverage report (python -m dsdoctor.messages.coverage): DeepSpeed's batch assertion and ZeRO-Offload's
    client-optimizer refusal, and NCCL's duplicate-GPU WARN, map to their rules; a message no signature knows to none."""
    from dsdoctor.messages.coverage import coverage, rule_of

    assert rule_of("train_batch_size is not equal to micro_batch_per_gpu * gradient_acc_step * world_size 0 != 0 * 0 "
                   "* 0") == "DS102"
    assert rule_of("Duplicate GPU detected : rank 0 and rank 0 both on CUDA device 0") == "NET415"
    assert rule_of("ZeRO inference only makes sense with ZeRO Stage 3 - please adjust your config") is None
    table = coverage()
    assert table["deepspeed"]["rules"]["DS121"] == 1 and table["nccl"]["rules"]["NET415"] == 1


def test_torchs_cpp_messages_are_mined_from_its_libraries(tmp_path):
    """mine_binary keeps the sentences of a library's strings that read as error messages (TORCH_CHECK's pieces),
    not code, schemas or names; the shipped torch_cpp.json is the installed torch's (a new torch needs `python -m
    dsdoctor.messages.generate`) and holds the C++ checks no Python source has."""
    import json

    from dsdoctor.messages.catalogue import HERE, cpp_origin
    from dsdoctor.messages.mine import mine_binary

    lib = tmp_path / "libfake.so"
    lib.write_bytes(b"\x00\x7fELF\x00Expected to mark a variable ready only once. This error is caused by one of the "
                    b"following reasons\x00aten::add.Tensor(Tensor self, Tensor other) -> Tensor\x00"
                    b"std::vector<int64_t> const& sizes() const;\x00short\x00The weights of the layer are "
                    b"nicely initialised here\x00")
    assert mine_binary([lib]) == {"libfake.so": ["Expected to mark a variable ready only once.",
                                                 "This error is caused by one of the following reasons"]}
    data = json.loads((HERE / "torch_cpp.json").read_text())
    assert data["versions"] == [installed("torch")[1]]
    found = cpp_origin("[rank1]: RuntimeError: Expected all tensors to be on the same device, but found at least two "
                       "devices, cpu and cuda:0!")
    assert (found["package"], found["file"], found["from"]) == ("torch", "lib/libtorch_cpu.so", "cpp")
    assert cpp_origin("ValueError: You are using ZeRO-Offload with a client provided optimizer") is None
