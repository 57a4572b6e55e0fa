"""Exceptions of the operator package."""


class BackendUnavailable(RuntimeError):
    """A backend cannot run here (no GPU, build failure, unsupported CPU)."""


def summarize(err: BaseException, limit: int = 300) -> str:
    """One line for a warning: the first compiler ``error:`` line if any, else the first line."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    if not lines:
        return type(err).__name__
    errors = [line for line in lines if "error" in line.lower() and line is not lines[0]]
    text = f"{lines[0][:120]} ... {errors[0]}" if errors else lines[0]
    return text if len(text) <= limit else text[: limit - 3] + "..."


class CpuIsaError(ValueError):
    """$POWERBENCH_CPU_ISA names an unknown kernel path or one this CPU lacks: a setting
    error, raised (not a reason to fall back to another backend)."""
