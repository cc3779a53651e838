"""The core's own HMAC-SHA256 (native/common/hmac_sha256.cc, used by the peer-port handshake)
against Python's hmac/hashlib, for keys and messages around every block boundary."""
import hashlib
import hmac
import os
import random
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NATIVE = os.path.join(ROOT, "native")
CXX = os.environ.get("CXX", "g++")

_PROGRAM = r"""
#include <cstdio>
#include <iostream>
#include <string>
#include "common/hmac_sha256.h"
static std::string unhex(const std::string& h) {
  std::string out;
  for (size_t i = 0; i + 1 < h.size(); i += 2) out.push_back(char(std::stoi(h.substr(i, 2), nullptr, 16)));
  return out;
}
int main() {
  std::string key, msg;
  while (std::cin >> key >> msg) {
    std::string k = unhex(key.substr(1)), m = unhex(msg.substr(1));
    hs::Digest d = hs::hmac_sha256(k, m);
    hs::Digest s = hs::sha256(reinterpret_cast<const uint8_t*>(m.data()), m.size());
    for (auto b : d) std::printf("%02x", b);
    std::printf(" ");
    for (auto b : s) std::printf("%02x", b);
    std::printf("\n");
  }
}
"""


@pytest.mark.timeout(300)
def test_native_hmac_sha256_matches_python(tmp_path):
    if shutil.which(CXX) is None:
        pytest.skip("no C++ compiler (%s) on PATH" % CXX)
    source = tmp_path / "hmac_check.cc"
    source.write_text(_PROGRAM)
    exe = str(tmp_path / "hmac_check")
    subprocess.run([CXX, "-std=c++17", "-O1", "-I" + NATIVE, str(source),
                    os.path.join(NATIVE, "common", "hmac_sha256.cc"), "-o", exe], check=True)
    rng = random.Random(7)
    cases = [(rng.randbytes(k), rng.randbytes(m))
             for k in (0, 1, 31, 32, 63, 64, 65, 100) for m in (0, 1, 55, 56, 63, 64, 65, 119, 120, 1000)]
    lines = "".join("k%s m%s\n" % (k.hex(), m.hex()) for k, m in cases)
    out = subprocess.run([exe], input=lines, capture_output=True, text=True, check=True).stdout.split("\n")
    for (key, msg), line in zip(cases, out):
        mac, digest = line.split()
        assert mac == hmac.new(key, msg, hashlib.sha256).hexdigest(), (len(key), len(msg))
        assert digest == hashlib.sha256(msg).hexdigest(), len(msg)
