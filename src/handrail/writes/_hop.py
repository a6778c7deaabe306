"""The hop a blocking store call takes off the event loop, as a type.

Owns `Hop`: `Writes` and `Executor` hand their `_io` to the modules they delegate to,
looked up per call, so replacing an instance's `_io` (profiling) moves every hop of it.
Never calls a store itself.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

__all__ = ["Hop"]

T = TypeVar("T")


class Hop(Protocol):
    """Runs a blocking call `fn(*args, **kwargs)` off the event loop and awaits it."""

    def __call__(
        self,
        fn: Callable[..., T],
        /,
        *args: Any,  # noqa: ANN401
        **kwargs: Any,  # noqa: ANN401
    ) -> Awaitable[T]: ...
