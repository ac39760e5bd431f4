"""Runs the kvx binary for the CLI tests; paths come from ctest's environment."""
import os
import subprocess

KVX = os.environ["KVX_BIN"]
SOURCE_DIR = os.environ["KVX_SOURCE_DIR"]
FIXTURES = os.environ.get("KVX_FIXTURES", "")
SHARED_DIR = os.environ.get("KVX_SHARED_DIR", os.path.join(SOURCE_DIR, "testdata"))  # the repository's testdata/ by default


def run(*args, timeout=300):
    """Returns (exit code, stdout, stderr) of `kvx ARGS`."""
    proc = subprocess.run([KVX, *args], capture_output=True, timeout=timeout)
    return proc.returncode, proc.stdout.decode("utf-8", "replace"), proc.stderr.decode("utf-8", "replace")


def render_chat_template(template, messages):
    """The prompt HF transformers' apply_chat_template renders: the model's Jinja template, sandboxed."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    return env.from_string(template).render(messages=messages, add_generation_prompt=True)
