"""cardgate for callers: gate A2A lifecycle logic on cardgate's verdict, in one line.

```python
async with cardgate.Registry(base_url, api_key=key) as registry:
    guarded = registry.guard(client, card_url=card_url, caller_version="1.0")
    async for response in guarded.send_message(request):
        ...
```
"""

from cardgate.decision import (
    Condition,
    Decision,
    Dedup,
    Evidence,
    Mode,
    Percentiles,
    Posture,
    RecordAsk,
    TrackRecord,
)
from cardgate.errors import CardLifecycleMismatchError, RegistryUnavailableError
from cardgate.guard import GuardedClient
from cardgate.registry import Registry
from cardgate.reports import ReportStats

__all__ = [
    "CardLifecycleMismatchError",
    "Condition",
    "Decision",
    "Dedup",
    "Evidence",
    "GuardedClient",
    "Mode",
    "Percentiles",
    "Posture",
    "RecordAsk",
    "Registry",
    "RegistryUnavailableError",
    "ReportStats",
    "TrackRecord",
]
__version__ = "0.1.0"
