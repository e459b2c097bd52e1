"""Redaction measured on a generated corpus of support turns (Spanish and English): how many
planted secrets are caught per kind, how many ordinary turns (order numbers, dates, prices,
tracking codes, phone numbers, postcodes) are altered, what a turn costs in microseconds, and
what redaction adds to the p50 of storing a turn over HTTP.

The corpus is generated (seeded) from templates. Each kind's wordings are split in two: the
dev part's wordings are the ones the rules were written against; the test part's wordings
were held out and are the ones reported. A secret counts as caught when no form of its raw
value (as written, or its digits and letters alone) is left in the redacted text.

Run with:
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_redaction.py --out benchmarks/results
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import string
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from stdnum import iban as iban_module  # noqa: E402
from stdnum import luhn  # noqa: E402
from stdnum.ar import cuit  # noqa: E402
from stdnum.br import cpf  # noqa: E402
from stdnum.es import dni, nie  # noqa: E402
from stdnum.mx import curp, rfc  # noqa: E402

from server.redaction import DEFAULT_KINDS, KINDS, redact  # noqa: E402

CHECKSUMMED = ("card", "iban", "national_id")  # the issue asks >= 99 % of these
WORDED = ("code", "cvv", "password")  # and >= 95 % of these

# -- secrets -----------------------------------------------------------------------------------


def card(rng: random.Random) -> tuple[str, str]:
    """(written, compact): a Luhn-valid number of a real issuer's prefix and length."""
    prefix, length = rng.choice(
        [
            ("4", 16),
            ("4", 16),
            ("51", 16),
            ("55", 16),
            ("2221", 16),
            ("37", 15),
            ("6011", 16),
            ("4", 19),
            (str(rng.randint(3528, 3589)), 16),
            ("36", 14),
            ("62", 16),
        ]
    )
    body = prefix + "".join(rng.choice(string.digits) for _ in range(length - len(prefix) - 1))
    number = body + luhn.calc_check_digit(body)
    style = rng.choice(["spaces", "plain", "dashes"])
    if style == "plain":
        return number, number
    sep = " " if style == "spaces" else "-"
    groups = [number[i : i + 4] for i in range(0, len(number), 4)]
    if length == 15:
        groups = [number[:4], number[4:10], number[10:]]
    return sep.join(groups), number


def iban(rng: random.Random) -> tuple[str, str]:
    country, bban_len = rng.choice([("ES", 20), ("DE", 18), ("FR", 23), ("IT", 23), ("PT", 21)])
    if country == "IT":
        bban = rng.choice(string.ascii_uppercase) + "".join(
            rng.choice(string.digits) for _ in range(bban_len - 1)
        )
    else:
        bban = "".join(rng.choice(string.digits) for _ in range(bban_len))
    check = iban_module.calc_check_digits(country + "00" + bban)
    number = country + check + bban
    if not iban_module.is_valid(number):  # a national check (Spain's, France's) failed: again
        return iban(rng)
    if rng.random() < 0.6:
        return " ".join(number[i : i + 4] for i in range(0, len(number), 4)), number
    return number, number


def national_id(rng: random.Random) -> tuple[str, str, str]:
    """(written, compact, which)."""
    which = rng.choice(["DNI", "NIE", "CURP", "RFC", "CUIT", "CPF"])
    digits = lambda n: "".join(rng.choice(string.digits) for _ in range(n))  # noqa: E731
    letters = lambda n: "".join(rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ") for _ in range(n))  # noqa: E731
    if which == "DNI":
        body = digits(8)
        number = body + dni.calc_check_digit(body)
        written = number if rng.random() < 0.7 else f"{body}-{number[-1]}"
    elif which == "NIE":
        body = rng.choice("XYZ") + digits(7)
        number = body + nie.calc_check_digit(body)
        written = number
    elif which == "CURP":
        date = f"{rng.randint(50, 99):02d}{rng.randint(1, 12):02d}{rng.randint(1, 28):02d}"
        body = letters(4) + date + rng.choice("HM") + rng.choice(["DF", "JC", "NL", "MC"])
        body += letters(3) + rng.choice(string.ascii_uppercase)
        number = body + curp.calc_check_digit(body)
        if not curp.is_valid(number):
            return national_id(rng)
        written = number
    elif which == "RFC":
        date = f"{rng.randint(50, 99):02d}{rng.randint(1, 12):02d}{rng.randint(1, 28):02d}"
        # the homoclave's alphabet: [1-9A-V][1-9A-Z], then the check digit
        body = letters(4) + date + rng.choice("123456789ABCDEFGHIJKLMNOPQRSTUV")
        body += rng.choice("123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ")
        number = body + rfc.calc_check_digit(body)
        if not rfc.is_valid(number, validate_check_digits=True):
            return national_id(rng)
        written = number
    elif which == "CUIT":
        body = rng.choice(["20", "23", "27", "30"]) + digits(8)
        number = body + cuit.calc_check_digit(body)
        if not cuit.is_valid(number):
            return national_id(rng)
        written = f"{number[:2]}-{number[2:10]}-{number[10]}"
    else:
        while True:
            body = digits(9)
            number = next(
                (body + f"{i:02d}" for i in range(100) if cpf.is_valid(body + f"{i:02d}")), ""
            )
            if number:
                break
        written = f"{number[:3]}.{number[3:6]}.{number[6:9]}-{number[9:]}"
    return written, number, which


def code(rng: random.Random) -> str:
    n = rng.choice([4, 6, 6, 6, 8])
    value = "".join(rng.choice(string.digits) for _ in range(n))
    if n == 6 and rng.random() < 0.25:
        return f"{value[:3]}-{value[3:]}"
    return value


def password(rng: random.Random) -> str:
    words = ["Perro", "Sol", "Luna", "Tango", "River", "Madrid", "Coco", "Blue", "Tiger"]
    return rng.choice(words) + str(rng.randint(10, 9999)) + rng.choice(["!", "#", "", "*", "$"])


# Wordings per kind; {s} is the secret. Even-indexed ones are the dev part, odd ones the test.
WORDINGS: dict[str, list[str]] = {
    "card": [
        "Te paso la tarjeta: {s}",
        "my card number is {s}",
        "La tarjeta es la {s}, a nombre de mi marido",
        "Use this card please {s} thanks",
        "tarjeta {s}",
        "pueden cobrar en la {s}?",
        "Card: {s}",
        "el número de la tarjeta de crédito es {s} y vence pronto",
        "{s} es mi visa",
        "charge it to {s}, it's the business one",
    ],
    "cvv": [
        "el cvv es {s}",
        "CVC {s}",
        "security code: {s}",
        "código de seguridad {s}",
        "cvv2 {s}",
        "and the CVV is {s}",
        "el CVV: {s}",
        "Security code is {s} on the back",
    ],
    "code": [
        "Tu código de verificación es {s}",
        "el código que me llegó es {s}",
        "My OTP is {s}",
        "me pide un PIN, es {s}",
        "Código: {s}",
        "the verification code they sent: {s}",
        "{s} es tu código de WhatsApp",
        "here's the code {s}",
        "el pin de la tarjeta es {s}",
        "clave de acceso {s}",
        "Your verification code is {s}. Don't share it.",
        "te paso el código {s} que me mandaron por SMS",
        "OTP {s}",
        "passcode: {s}",
    ],
    "iban": [
        "IBAN para el reembolso: {s}",
        "my IBAN is {s}",
        "Hacedme la transferencia a {s}",
        "refund to account {s} please",
        "cuenta {s}",
        "IBAN: {s} (titular: Ana)",
    ],
    "national_id": [
        "Mi DNI es {s}",
        "my ID number is {s}",
        "documento {s}",
        "the document number: {s}",
        "Te paso mi identificación: {s}",
        "ID {s} for the booking",
        "{s} es mi documento",
        "número de documento {s}, a nombre de Juan",
    ],
    "password": [
        "mi contraseña es {s}",
        "my password is {s}",
        "la clave es {s}",
        "password: {s}",
        "Contraseña: {s}",
        "the new password is {s} if you need to log in",
        "mi contraseña nueva es {s}",
        "pwd = {s}",
    ],
}

# Wordings written after the rules were frozen and never used to change them (part "unseen"):
# how the rules do on ways of writing a secret nobody looked at.
UNSEEN: dict[str, list[str]] = {
    "card": [
        "número de tarjeta {s} (visa)",
        "ahí va: {s}",
        "paga con esta, {s}",
        "the number on the front is {s}",
    ],
    "cvv": ["los 3 de atrás son {s}", "cvv/cvc {s}", "the 3 digits on the back: {s}"],
    "code": [
        "el número que me llegó por SMS: {s}",
        "my 2FA code is {s}",
        "token {s}",
        "me llegó esto: {s} es su clave temporal",
        "Código de acceso: {s}",
        "el código de confirmación es el {s}",
    ],
    "iban": ["la cuenta para devolver el dinero {s}", "IBAN {s} (banco Santander)"],
    "national_id": ["DNI/NIE {s}", "identificación oficial {s}", "soy {s}"],
    "password": [
        "la contraseña del wifi es {s}",
        "usuario ana, pass {s}",
        "te dejo la clave: {s}",
        "password for the portal = {s}",
    ],
}

# Ordinary support turns: numbers that are not secrets.
ORDINARY: list[str] = [
    "Hola, quería saber el estado de mi pedido {order}",
    "Hi, where is my order #{order}? It was due on {date}",
    "El número de seguimiento es {tracking}",
    "Tracking number {tracking}, it says delivered but nothing arrived",
    "Me cobraron {price} € dos veces el {date}",
    "I was charged ${price} twice",
    "Llámame al {phone} por la tarde",
    "You can reach me at {phone}",
    "La reserva es para el {date} a las {time}, somos {n} personas",
    "Booking for {n} people on {date} at {time}",
    "Vivo en el código postal {postcode}",
    "My zip code is {zip}",
    "El código de pedido es {order}",
    "order code {order}",
    "Quiero cambiar la talla, compré la {n}",
    "Factura {invoice} del {date}, importe {price} €",
    "Invoice {invoice}, amount ${price}",
    "El código de descuento {promo} no funciona",
    "Ref. {order}, incidencia abierta el {date}",
    "Mi número de socio es {member}",
    "The product code is {ean}",
    "Código de barras {ean}",
    "Vuelo IB{flight} el {date}, asiento {seat}",
    "Room {room}, check-in on {date}",
    "Son {n} unidades a {price} € cada una",
    "Han pasado {n} días y nada",
    "El modelo es el {model}, número de serie {serial}",
    "Te llamo entre las {time} y las {time2}",
    "Pagué con tarjeta acabada en {last4}",
    "The card ending in {last4} was declined",
    "Mi pedido {order} y el {order2} llegaron juntos",
    "¿Me podéis dar el código de la reserva? Es la {order}",
    "ya cambié mi contraseña ayer, gracias",
    "no me llega el código de verificación",
    "Expediente {order}/{year}",
    "Año {year}, kilómetros {km}",
    "Gracias! Todo bien",
    "ok, perfecto",
]


def ordinary_values(rng: random.Random) -> dict[str, str]:
    d = lambda n: "".join(rng.choice(string.digits) for _ in range(n))  # noqa: E731
    ean13 = d(12)
    # EAN-13's check digit (weights 1 and 3)
    total = sum(int(c) * (3 if i % 2 else 1) for i, c in enumerate(ean13))
    ean13 += str((10 - total % 10) % 10)
    return {
        "order": rng.choice([d(rng.randint(5, 10)), "A-" + d(6), "PED" + d(8)]),
        "order2": d(rng.randint(5, 9)),
        "date": f"{rng.randint(1, 28):02d}/{rng.randint(1, 12):02d}/20{rng.randint(24, 27)}",
        "time": f"{rng.randint(8, 21)}:{rng.choice(['00', '15', '30', '45'])}",
        "time2": f"{rng.randint(8, 21)}:{rng.choice(['00', '30'])}",
        "tracking": rng.choice(
            ["1Z" + d(3) + "AA" + d(10), "LX" + d(9) + "ES", d(12), d(14), d(20), "JD" + d(18)]
        ),
        "price": rng.choice(
            [
                f"{rng.randint(5, 2500)}",
                f"{rng.randint(5, 900)},{d(2)}",
                f"{rng.randint(5, 900)}.{d(2)}",
            ]
        ),
        "phone": rng.choice(
            [
                f"+34 6{d(2)} {d(3)} {d(3)}",
                f"+52 1 55 {d(4)} {d(4)}",
                f"+1 (555) {d(3)}-{d(4)}",
                f"6{d(8)}",
                f"+54 9 11 {d(4)}-{d(4)}",
                f"+55 11 9{d(4)}-{d(4)}",
            ]
        ),
        "n": str(rng.randint(1, 12)),
        "postcode": d(5),
        "zip": d(5),
        "invoice": rng.choice(["F" + d(7), d(8), "2026/" + d(5)]),
        "promo": rng.choice(["VERANO20", "SAVE" + d(2), "BIENVENIDA"]),
        "member": d(rng.randint(6, 10)),
        "ean": ean13,
        "flight": d(4),
        "seat": f"{rng.randint(1, 40)}{rng.choice('ABCDEF')}",
        "room": d(3),
        "model": "X" + d(3),
        "serial": "SN" + d(10),
        "last4": d(4),
        "year": str(rng.randint(2015, 2026)),
        "km": d(5),
    }


@dataclass(frozen=True, slots=True)
class Turn:
    text: str
    kind: str | None  # the planted secret's kind; None for an ordinary turn
    raw: tuple[str, ...]  # the forms of the secret that must not survive
    part: str  # dev or test
    detail: str = ""  # a national id's name


def corpus(seed: int, ordinary: int, secrets_per_kind: int) -> list[Turn]:
    rng = random.Random(seed)
    turns: list[Turn] = []
    for _ in range(ordinary):
        template = rng.choice(ORDINARY)
        text = template.format(**ordinary_values(rng))
        turns.append(Turn(text, None, (), "dev" if rng.random() < 0.5 else "test"))
    for kind, wordings in WORDINGS.items():
        unseen = UNSEEN[kind]
        for i in range(secrets_per_kind):
            index = rng.randrange(len(wordings) + len(unseen))
            part = "unseen" if index >= len(wordings) else "dev" if index % 2 == 0 else "test"
            wording = unseen[index - len(wordings)] if part == "unseen" else wordings[index]
            detail = ""
            if kind == "card":
                written, compact = card(rng)
                raw: tuple[str, ...] = (written, compact)
            elif kind == "cvv":
                written = "".join(rng.choice(string.digits) for _ in range(rng.choice([3, 3, 4])))
                raw = (written,)
            elif kind == "iban":
                written, compact = iban(rng)
                raw = (written, compact)
            elif kind == "national_id":
                written, compact, detail = national_id(rng)
                raw = (written, compact)
            elif kind == "code":
                written = code(rng)
                raw = (written, written.replace("-", ""))
            else:
                written = password(rng)
                raw = (written,)
            text = wording.format(s=written)
            # Half the secrets sit inside a longer, ordinary turn.
            if i % 2:
                text = rng.choice(ORDINARY).format(**ordinary_values(rng)) + ". " + text
            turns.append(Turn(text, kind, raw, part, detail))
    rng.shuffle(turns)
    return turns


# -- measuring ----------------------------------------------------------------------------------


def caught(turn: Turn, redacted: str) -> bool:
    if turn.kind == "cvv":  # three digits may well be elsewhere in the turn: the CVV's own place
        return turn.text.replace(turn.raw[0], "", 1) != redacted.replace("[CVV]", "", 1) or (
            "[CVV]" in redacted
        )
    return all(r not in redacted for r in turn.raw)


def measure(turns: Sequence[Turn], kinds: frozenset[str]) -> dict[str, Any]:
    rows: dict[str, dict[str, Any]] = {}
    costs: list[float] = []
    altered_examples: list[dict[str, str]] = []
    missed_examples: list[dict[str, str]] = []
    ordinary = {"dev": [0, 0], "test": [0, 0]}  # [altered, all]
    for turn in turns:
        started = time.perf_counter()
        out = redact(turn.text, kinds)
        costs.append((time.perf_counter() - started) * 1e6)
        if turn.kind is None:
            ordinary[turn.part][1] += 1
            if out != turn.text:
                ordinary[turn.part][0] += 1
                altered_examples.append({"text": turn.text, "redacted": out})
            continue
        row = rows.setdefault(f"{turn.kind}/{turn.part}", {"n": 0, "caught": 0})
        row["n"] += 1
        if caught(turn, out):
            row["caught"] += 1
        elif len(missed_examples) < 40:
            missed_examples.append({"kind": turn.kind, "text": turn.text, "redacted": out})
    return {
        "recall": {
            k: {**v, "percent": round(100 * v["caught"] / v["n"], 2)}
            for k, v in sorted(rows.items())
        },
        "ordinary": {
            part: {"altered": a, "turns": n, "percent": round(100 * a / max(n, 1), 3)}
            for part, (a, n) in ordinary.items()
        },
        "cost_us": {
            "p50": round(statistics.median(costs), 1),
            "p99": round(sorted(costs)[int(len(costs) * 0.99)], 1),
            "mean": round(statistics.fmean(costs), 1),
        },
        "altered_examples": altered_examples[:40],
        "missed_examples": missed_examples,
    }


def store_turn_p50(
    turns: Sequence[Turn], rounds: int, encoder_factory: Any = None
) -> dict[str, float]:
    """p50 of POST .../messages over HTTP (in process, SQLite), redaction on and off: the same
    text to each in turn (which goes first alternates), so load on the machine hits both alike."""
    from fastapi.testclient import TestClient

    from server.app import create_app
    from server.config import Settings

    admin = "bench-admin-key-0123456789abcdef"
    header = {"Authorization": f"Bearer {admin}"}
    with tempfile.TemporaryDirectory() as folder:
        settings = Settings(data_dir=Path(folder), admin_key=admin, sqlite_synchronous="NORMAL")
        app = create_app(settings, run_workers=False, encoder_factory=encoder_factory)
        with TestClient(app) as client:
            client.put("/v1/agents/off/settings", json={"redact": "off"}, headers=header)
            timings: dict[str, list[float]] = {"on": [], "off": []}
            texts = [t.text for t in turns]
            for i in range(1, rounds * 100 + 1):
                text = texts[i % len(texts)]
                phone = f"+1555{i % 50:07d}"
                for agent in ("on", "off") if i % 2 == 0 else ("off", "on"):
                    started = time.perf_counter()
                    response = client.post(
                        f"/v1/agents/{agent}/people/{phone}/messages",
                        json={"role": "user", "content": text},
                        headers=header,
                    )
                    timings[agent].append((time.perf_counter() - started) * 1000)
                    assert response.status_code == 201, response.text
    on, off = statistics.median(timings["on"]), statistics.median(timings["off"])
    return {"on_ms": round(on, 3), "off_ms": round(off, 3), "added_ms": round(on - off, 3)}


def table(result: dict[str, Any]) -> str:
    lines = [
        "| kind | part | secrets | caught | recall % |",
        "| --- | --- | --- | --- | --- |",
    ]
    for key, row in result["default"]["recall"].items():
        kind, part = key.split("/")
        lines.append(f"| {kind} | {part} | {row['n']} | {row['caught']} | {row['percent']} |")
    for key, row in result["optional"]["recall"].items():
        kind, part = key.split("/")
        if kind in ("email", "address"):
            lines.append(f"| {kind} | {part} | {row['n']} | {row['caught']} | {row['percent']} |")
    lines += ["", "| ordinary turns | altered | turns | % |", "| --- | --- | --- | --- |"]
    for part, row in result["default"]["ordinary"].items():
        lines.append(f"| {part} | {row['altered']} | {row['turns']} | {row['percent']} |")
    cost = result["default"]["cost_us"]
    lines += [
        "",
        f"Cost per turn (default kinds): p50 {cost['p50']} µs, p99 {cost['p99']} µs, "
        f"mean {cost['mean']} µs.",
    ]
    if "store" in result:
        s = result["store"]
        lines.append(
            f"Storing a turn over HTTP (in process, SQLite), p50: {s['on_ms']} ms with "
            f"redaction, {s['off_ms']} ms without: {s['added_ms']:+} ms."
        )
    return "\n".join(lines)


def main(
    argv: Sequence[str] | None = None,
    progress: Callable[[str], None] = print,
    encoder_factory: Any = None,
) -> dict[str, Any]:
    """encoder_factory: the server's encoder for the HTTP part (tests pass a fake one)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=27)
    parser.add_argument("--ordinary", type=int, default=6000, help="ordinary turns")
    parser.add_argument("--secrets", type=int, default=400, help="planted secrets per kind")
    parser.add_argument("--store-rounds", type=int, default=20, help="0: skip the HTTP part")
    parser.add_argument("--out", type=Path, default=None, help="write redaction.json/.md")
    args = parser.parse_args(argv)
    turns = corpus(args.seed, args.ordinary, args.secrets)
    progress(f"corpus: {len(turns)} turns ({args.ordinary} ordinary), seed {args.seed}")
    result: dict[str, Any] = {
        "seed": args.seed,
        "turns": len(turns),
        "default_kinds": sorted(DEFAULT_KINDS),
        "default": measure(turns, DEFAULT_KINDS),
        "optional": measure(_with_optional(turns, args.seed), frozenset(KINDS)),
    }
    if args.store_rounds:
        progress(f"storing {args.store_rounds * 200} turns over HTTP, redaction on and off")
        result["store"] = store_turn_p50(turns, args.store_rounds, encoder_factory)
    text = table(result)
    progress(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "redaction.json").write_text(json.dumps(result, indent=1, ensure_ascii=False))
        (args.out / "redaction.md").write_text(text + "\n")
    return result


def _with_optional(turns: Sequence[Turn], seed: int) -> list[Turn]:
    """The corpus plus emails and street addresses, for the optional kinds."""
    rng = random.Random(seed + 1)
    extra: list[Turn] = []
    names = ["ana.perez", "jlopez", "maria_g", "tom.smith", "k.ito"]
    domains = ["gmail.com", "hotmail.es", "empresa.com.mx", "yahoo.com"]
    streets = [
        ("Calle Mayor {n}, 3ºB", "es"),
        ("calle de la Princesa {n}", "es"),
        ("Avenida Insurgentes Sur {n}", "es"),
        ("Av. Corrientes {n}", "es"),
        ("{n} Main Street", "en"),
        ("{n} Oak Avenue", "en"),
    ]
    for i in range(200):
        email = f"{rng.choice(names)}{rng.randint(1, 99)}@{rng.choice(domains)}"
        wording = ["mi correo es {s}", "email me at {s}", "escríbeme a {s}", "{s}"][i % 4]
        extra.append(Turn(wording.format(s=email), "email", (email,), "dev" if i % 2 else "test"))
        street, _ = streets[i % len(streets)]
        address = street.format(n=rng.randint(1, 999))
        wording = ["Envíalo a {s}", "ship it to {s}", "vivo en {s}", "my address is {s}"][i % 4]
        raw = (address,)
        extra.append(Turn(wording.format(s=address), "address", raw, "dev" if i % 2 else "test"))
    return [*turns, *extra]


if __name__ == "__main__":
    main()
