"""Phone numbers as the store keeps them (E.164, read with phonenumbers), shared by the API's
validation and the audit log's redaction; nothing here imports the rest of the server."""

from __future__ import annotations

import re

import phonenumbers

# What an earlier release accepted: '+' and 8-15 digits, whether or not the number can exist.
LEGACY_PHONE = re.compile(r"\+[0-9]{8,15}")  # used with fullmatch, never match


def e164(compact: str) -> str | None:
    """'+' and digits as the number they name, in E.164, WhatsApp's Mexican mobiles folded
    ('+521' and ten digits is '+52' and those ten digits); None for a number that cannot
    exist (an unknown country code, too few or too many digits for its country)."""
    try:
        parsed = phonenumbers.parse(compact, None)
    except phonenumbers.NumberParseException:
        return None
    folded = fold_mexican_mobile(parsed)
    if not phonenumbers.is_possible_number(folded):
        return None
    return phonenumbers.format_number(folded, phonenumbers.PhoneNumberFormat.E164)


def fold_mexican_mobile(number: phonenumbers.PhoneNumber) -> phonenumbers.PhoneNumber:
    """'+52 1 55 1234 5678' (a mobile with the '1' Mexico dropped in 2019, which WhatsApp
    still reports) becomes '+52 55 1234 5678', the same person's number everywhere else."""
    national = str(number.national_number)
    if number.country_code == 52 and len(national) == 11 and national.startswith("1"):
        return phonenumbers.PhoneNumber(country_code=52, national_number=int(national[1:]))
    return number
