"""Is the Hugging Face hub reachable? (Models, datasets and benchmark sets all ask.)"""

from __future__ import annotations

import os
import socket
from urllib.parse import urlparse


def hub_reachable(timeout_s: float = 1.5) -> bool:
    """A quick TCP probe of the hub endpoint (no HTTP retries); False with HF_HUB_OFFLINE."""
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False"):
        return False
    url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    try:
        with socket.create_connection((url.hostname or "", url.port or 443), timeout=timeout_s):
            return True
    except OSError:
        return False
