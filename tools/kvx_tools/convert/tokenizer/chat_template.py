"""Reduces a model's Jinja chat template to a conversation format the engine applies natively.

kvx does not interpret Jinja at run time. Instead the converter renders the template with jinja2, in the
environment HF transformers uses for apply_chat_template, on probe conversations, and records the format
when every rendering equals what that format would produce: ChatML, with or without a default system
message, and Gemma's turns (engine/model/chat_format.h draws both). A template that matches nothing is kept
in the model directory with the reason, so that `kvx chat` can say why it refuses.

A template is a program, and jinja2's sandbox bounds neither its time nor its memory: the analysis runs in a
child process with both bounded (tokenizer/bounded_child.py), and each rendering's length is bounded as it is produced.
A template that breaches a bound is treated like one that jinja2 cannot render: kept, with the reason. It is
no reason to stop the conversion, since the weights do not depend on it and `kvx chat` is the only reader.
"""

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

from .bounded_child import ChildFailed, LimitExceeded, run_bounded
from ..errors import ConvertError

IM_START, IM_END = "<|im_start|>", "<|im_end|>"
GEMMA_START, GEMMA_END = "<start_of_turn>", "<end_of_turn>"
PROBE_SYSTEM = "You answer briefly."
# Passed as bos_token: a template that writes it first gets "add_bos" (the engine writes the model's BOS token).
BOS_SENTINEL = "\x02kvx-bos\x03"
# Real templates render the probes in milliseconds into a few hundred characters (a few kB with a long
# default system message); these bounds leave orders of magnitude of room.
RENDER_SECONDS = 10
RENDER_MEMORY_BYTES = 512 << 20
RENDER_MAX_CHARS = 1_000_000


class RenderTooLong(Exception):
    pass


def chatml(messages, default_system=None):
    """The ChatML rendering of messages with the assistant header appended (add_generation_prompt)."""
    text = ""
    if default_system is not None and messages[0]["role"] != "system":
        text += f"{IM_START}system\n{default_system}{IM_END}\n"
    for m in messages:
        text += f"{IM_START}{m['role']}\n{m['content']}{IM_END}\n"
    return text + f"{IM_START}assistant\n"


def gemma(messages):
    """Gemma's rendering of messages with the model's turn header appended (add_generation_prompt): the system
    message leads the first user turn, a blank line after it; messages are trimmed; the assistant is "model"."""
    prefix = ""
    if messages[0]["role"] == "system":
        prefix, messages = messages[0]["content"] + "\n\n", messages[1:]
    text = ""
    for i, m in enumerate(messages):
        role = "model" if m["role"] == "assistant" else m["role"]
        text += f"{GEMMA_START}{role}\n{prefix if i == 0 else ''}{m['content'].strip()}{GEMMA_END}\n"
    return text + f"{GEMMA_START}model\n"


def _environment():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    return env


def _probes():
    user1 = {"role": "user", "content": "What is 2 + 2?"}
    answer = {"role": "assistant", "content": "4."}
    user2 = {"role": "user", "content": "And 3 + 3?\nSay it in words."}
    system = {"role": "system", "content": PROBE_SYSTEM}
    return [[user1], [system, user1], [user1, answer, user2], [system, user1, answer, user2]]


def _default_system(rendered_single_user):
    """The system message the template inserts before a lone user message, or None."""
    head = f"{IM_START}system\n"
    if not rendered_single_user.startswith(head):
        return None
    end = rendered_single_user.find(f"{IM_END}\n")
    return rendered_single_user[len(head):end] if end >= 0 else None


def _bounded_render(template, **context):
    """template rendered with context, stopped as soon as it passes RENDER_MAX_CHARS."""
    parts, length = [], 0
    for part in template.generate(**context):
        length += len(part)
        if length > RENDER_MAX_CHARS:
            raise RenderTooLong(f"its rendering is longer than {RENDER_MAX_CHARS} characters")
        parts.append(part)
    return "".join(parts)


def _analyse(source, eos_token):
    """The analysis proper, run in the child process: the "chat" entry."""
    try:
        template = _environment().from_string(source)

        def render(messages):
            return _bounded_render(template, messages=messages, add_generation_prompt=True,
                                   bos_token=BOS_SENTINEL, eos_token=eos_token)

        probes = _probes()
        renderings = [render(messages) for messages in probes]
        # A BOS anywhere else (before every turn, say) is left in the text, where no format matches it.
        add_bos = all(r.startswith(BOS_SENTINEL) for r in renderings)
        if add_bos:
            renderings = [r[len(BOS_SENTINEL):] for r in renderings]
        default_system = _default_system(renderings[0])
        entry = None
        if all(got == chatml(messages, default_system) for got, messages in zip(renderings, probes)):
            entry = {"format": "chatml"}
            if default_system is not None:
                entry["default_system"] = default_system
        elif all(got == gemma(messages) for got, messages in zip(renderings, probes)):
            padded = [{"role": "user", "content": "  What is 2 + 2?\n"}]
            if render(padded)[len(BOS_SENTINEL) if add_bos else 0:] != gemma(padded):
                return _unsupported("its turns are Gemma's but it does not trim messages as Gemma's does")
            entry = {"format": "gemma"}
        if entry is None:
            got = renderings[0]
            return _unsupported(f"its rendering of a 1-message conversation is neither ChatML nor Gemma's turns "
                                f"(starts {got[:60]!r}); kvx applies those formats only")
    except RenderTooLong as e:
        return _unsupported(str(e))
    except jinja2.exceptions.TemplateError as e:
        return _unsupported(f"jinja2 cannot render it: {e}")
    except MemoryError:
        raise  # run_bounded reports it with the limit
    except Exception as e:  # a template's Python-level failure (TypeError, RecursionError, ...) is its own fault
        first_line = (str(e).strip().splitlines() or [""])[0]
        return _unsupported(f"jinja2 cannot render it: {type(e).__name__}: {first_line}")
    if add_bos:
        entry["add_bos"] = True
    return entry


def _unsupported(reason):
    return {"format": None, "unsupported": reason}


def analyse_chat_template(source, eos_token=""):
    """config.json's "chat" entry (minus the file name) for the template text `source`. Its bos_token is
    BOS_SENTINEL: the engine writes the model's BOS token where the template writes it."""
    try:
        return run_bounded(lambda: _analyse(source, eos_token), seconds=RENDER_SECONDS,
                           memory_bytes=RENDER_MEMORY_BYTES)
    except LimitExceeded as e:
        return _unsupported(f"rendering it {e}")
    except ChildFailed as e:  # the child crashed (a C-level stack overflow, say) rather than report
        return _unsupported(f"jinja2 cannot render it: {e}")
    except OSError as e:  # no process to render in: the machine's fault, not the template's
        raise ConvertError(f"cannot start a process to analyse the chat template ({e.strerror or e})") from None
