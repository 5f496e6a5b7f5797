"""What a cubin's machine code is, apart from its names: :func:`machine_code_digest` hashes the
``.text.*`` sections of the ELF NVRTC returns (the SASS), not its symbol tables, whose internal
names carry a hash NVRTC derives from the program (a header moved between files changes every
cubin's bytes, not one instruction). Compiles of the same code, from any folder or before and
after such a refactor, give the same digest (``python -m kernel_lab compile --digests FILE``)."""

from __future__ import annotations

import hashlib
import struct

_SECTION = struct.Struct("<IIQQQQIIQQ")  # Elf64_Shdr: name, type, flags, addr, offset, size, ...


def text_sections(elf: bytes) -> list[tuple[str, bytes]]:
    """(name, bytes) of each ``.text.*`` section of a 64-bit little-endian ELF (a cubin)."""
    if elf[:4] != b"\x7fELF" or elf[4] != 2 or elf[5] != 1:
        raise ValueError("not a 64-bit little-endian ELF (a cubin)")
    shoff, = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)
    heads = [_SECTION.unpack_from(elf, shoff + i * shentsize) for i in range(shnum)]
    names_at = heads[shstrndx][4]

    def name(off: int) -> str:
        return elf[names_at + off:elf.index(b"\0", names_at + off)].decode()

    return [(name(h[0]), elf[h[4]:h[4] + h[5]]) for h in heads if name(h[0]).startswith(".text.")]


def machine_code_digest(cubin: bytes) -> str:
    """sha256 of a cubin's machine code: its ``.text.*`` sections' bytes, sorted by content (a
    section's name holds the internal names' hash too)."""
    h = hashlib.sha256()
    for code in sorted(code for _, code in text_sections(cubin)):
        h.update(len(code).to_bytes(8, "little"))
        h.update(code)
    return h.hexdigest()
