"""Emails and street addresses: optional kinds, redacted only for an agent that asks."""

from __future__ import annotations

import re

from server.redaction.cards import DOTS
from server.redaction.text import Scan

_EMAIL = re.compile(r"(?<![\w.+-])[\w.+-]{1,64}@([A-Za-z0-9-]{1,63}(?:\.[A-Za-z0-9-]{1,63})+)")
_ADDRESS = re.compile(
    r"\b(?:calle|c/|avenida|avda\.?|av\.|paseo|plaza|pza\.?|carrera|cra\.?|camino|ronda|"
    r"traves[ií]a|rua|street|avenue|road|boulevard|blvd\.?|lane|drive)"
    r"\s+(?:de\s+(?:la\s+|los\s+|las\s+)?)?[A-ZÁÉÍÓÚÑ][\w'.ÁÉÍÓÚÑáéíóúñ]*"
    r"(?:\s+[\w'.ÁÉÍÓÚÑáéíóúñ]+){0,4}?,?\s*(?:n[º°o]\.?\s*|#\s*)?\d{1,5}[A-Z]?"
    r"(?:\s*+(?:,\s*+)?\d{1,2}\s*+[º°ª]\s*+[A-Z]?)?"
    r"|\b\d{1,5}\s+(?:[A-Z][\w'.]*\s+){1,3}(?:street|st\.|avenue|ave\.|road|rd\.|boulevard|"
    r"blvd\.?|lane|ln\.|drive|dr\.)",
    re.IGNORECASE,
)
_ADDRESS_WORD = re.compile(
    r"calle|c/|avenida|avda|av\.|paseo|plaza|pza|carrera|cra|camino|"
    r"ronda|traves|rua|street|avenue|road|boulevard|blvd|lane|drive"
)


def find_emails(scan: Scan) -> None:
    if "@" not in scan.view:
        return
    for match in _EMAIL.finditer(scan.view):
        scan.claim(match.start(), match.end(), f"[email {DOTS}@{match.group(1)}]", "email")
    scan.settle()


def find_addresses(scan: Scan) -> None:
    if not _ADDRESS_WORD.search(scan.fold):
        return
    for match in _ADDRESS.finditer(scan.view):
        scan.claim(match.start(), match.end(), "[dirección]", "address")
    scan.settle()
