"""How this node serves load balancers: listen address, port map, where files live, the ACME CA.

Without a port map the agent takes the real ports 80/443 and works with the node's own nginx
and HAProxy (a file per load balancer in their configuration folders, reloaded as the system
does). With a port map (`--lb-port-map 80:8080,443:8443`: the embedded demo, tests) it runs its
own nginx and HAProxy under `root`, listening on the mapped ports.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from agent.load_balancers.acme import LETS_ENCRYPT_DIRECTORY, AcmeSettings

LB_PORTS = (80, 443)


@dataclass(frozen=True)
class LbSettings:
    bind: str | None = None  # the listen address (None: all addresses)
    port_map: dict[int, int] = field(default_factory=dict)  # 80/443 -> the port actually listened on
    root: str | None = None  # configurations, sockets, certificates (None: <state dir>/lb)
    acme_directory: str = LETS_ENCRYPT_DIRECTORY
    acme_ca_bundle: str | None = None
    # tests (`--lb-test-hook`, not in --help): add <root>/test-hook-<engine>.conf verbatim to each render
    broken_render_hook: bool = False

    @property
    def agent_run(self) -> bool:
        """A port map means the agent runs its own engines (it may not take the real ports)."""
        return bool(self.port_map)

    def lb_root(self, state_dir: str) -> Path:
        return Path(self.root) if self.root else Path(state_dir) / "lb"

    def listen_port(self, port: int) -> int:
        return self.port_map.get(port, port)

    def acme(self, state_dir: str) -> AcmeSettings:
        bundle = Path(self.acme_ca_bundle) if self.acme_ca_bundle else None
        return AcmeSettings(self.lb_root(state_dir) / "acme", directory_url=self.acme_directory, ca_bundle=bundle)


def parse_port_map(text: str) -> dict[int, int]:
    """``80:8080,443:8443`` -> {80: 8080, 443: 8443}; ValueError says what is wrong."""
    mapping: dict[int, int] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        public, sep, actual = part.partition(":")
        if not sep or not public.isdigit() or not actual.isdigit():
            raise ValueError(f"{part!r} is not PORT:PORT")
        if int(public) not in LB_PORTS:
            raise ValueError(f"only ports 80 and 443 are mapped, not {public}")
        if not 0 < int(actual) < 65536:
            raise ValueError(f"{actual} is not a port")
        mapping[int(public)] = int(actual)
    if not mapping:
        raise ValueError("an empty port map")
    return mapping
