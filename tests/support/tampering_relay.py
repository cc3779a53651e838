"""A TCP relay between two ranks that can flip one byte of a channel after the handshake,
as a machine on the path could (tests/security/test_data_plane_auth.py)."""
import struct
import threading

from support.tcp_relay import TcpRelay

# The connector's handshake bytes (native/transport/peer_wire.h): greeting (magic, rank, channel,
# nonce, MAC) then the proof; what follows on the connection is the channel's stream.
_GREETING, _PROOF = 12 + 16 + 32, 32
CONTROL_CHANNEL, DATA_CHANNEL = 1, 2


class TamperingRelay(TcpRelay):
    """Forwards every connection to 127.0.0.1:``target_port``. With ``flip_at`` set, the byte
    ``flip_at`` bytes into the connector's stream on ``channel`` (after its handshake) is inverted
    on its way to the acceptor."""

    def __init__(self, target_port, flip_at=None, channel=DATA_CHANNEL):
        self.flip_at, self.channel = flip_at, channel
        self.flipped = threading.Event()
        self._channels = {}  # connection index -> its channel (-1: unreadable), once known
        super().__init__(target_port)

    def on_chunk(self, index, from_connector, chunk, seen):
        if not from_connector:
            return chunk
        if index not in self._channels and seen + len(chunk) >= 12:
            head = bytes(chunk[:12]) if seen == 0 else None
            self._channels[index] = struct.unpack(">III", head)[2] if head else -1
        if self._channels.get(index) == self.channel and self.flip_at is not None:
            at = _GREETING + _PROOF + self.flip_at - seen
            if 0 <= at < len(chunk) and not self.flipped.is_set():
                chunk[at] ^= 0xFF
                self.flipped.set()
        return chunk
