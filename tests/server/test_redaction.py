# ruff: noqa: RUF001 (full-width digits and colons are what these tests are about)
"""Secrets are redacted before they are stored: each kind through the API, then every file of
the data folder, the vector store, the model's prompts, exports and searches are read back."""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Iterator

import pytest
from stdnum.es import dni, nie
from stdnum.mx import curp

from server.redaction import DEFAULT_KINDS, KINDS, kinds_of, redact, redact_json
from server.schemas import REDACT_KINDS
from tests.conftest import AGENT, PHONE, Api, admin, assert_error
from tests.fake_llm import FakeLLM
from tests.server.test_erasure import lance_texts
from tests.server.test_pg_erasure import pg_dump

CURP = "GODE561231HDFRRN0" + curp.calc_check_digit("GODE561231HDFRRN0")
DNI = "48213377" + dni.calc_check_digit("48213377")
NIE = "Y2718281" + nie.calc_check_digit("Y2718281")

# What a person writes, and the raw values none of the stored text may hold.
TURNS = [
    ("Te paso la tarjeta: 5500 0055 5555 5559, caduca 09/28, cvv 737", "[tarjeta ••••5559]"),
    ("Tu código de verificación es 73920481", "[código]"),
    ("IBAN para el reembolso: ES91 2100 0418 4502 0005 1332", "[IBAN ES91••••1332]"),
    (f"Mi DNI es {DNI} y el de mi hermano {NIE}", "[DNI]"),
    (f"CURP {CURP}, RFC GODE561231GR8", "[CURP]"),
    ("mi cpf 111.444.777-35 y el CUIT 20-12345678-6", "[CPF]"),
    ("mi contraseña es Perro123!Azul", "[contraseña]"),
]
RAW = [
    "5500 0055 5555 5559",
    "5500005555555559",
    "cvv 737",
    "73920481",
    "ES91 2100 0418 4502 0005 1332",
    "ES9121000418450200051332",
    DNI,
    NIE,
    CURP,
    "GODE561231GR8",
    "111.444.777-35",
    "20-12345678-6",
    "Perro123!Azul",
]


# -- the rules ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Te paso la tarjeta: 4111 1111 1111 1111", "Te paso la tarjeta: [tarjeta ••••1111]"),
        ("4111-1111-1111-1111 exp 09/28 737", "[tarjeta ••••1111] exp 09/28 [CVV]"),
        ("CVC: 1234", "CVC: [CVV]"),
        (
            "Tu código de verificación de WhatsApp es 482-913",
            "Tu código de verificación de WhatsApp es [código]",
        ),
        ("TU CÓDIGO ES 4829", "TU CÓDIGO ES [código]"),
        ("482913 es tu código de acceso", "[código] es tu código de acceso"),
        ("My OTP: 99887766", "My OTP: [código]"),
        ("el pin es 1234", "el pin es [código]"),
        ("iban ES9121000418450200051332.", "iban [IBAN ES91••••1332]."),
        ("My password is hunter2.", "My password is [contraseña]."),
        ("cpf 11144477735", "cpf [CPF]"),
        ("el número que me llegó por SMS: 846721", "el número que me llegó por SMS: [código]"),
        ("usuario ana, pass Blue3540#", "usuario ana, pass [contraseña]"),
        ("password for the portal = River6170$", "password for the portal = [contraseña]"),
        # A card among other numbers: a quantity before it, a CVV or an expiry after it.
        ("4111 1111 1111 1111 123", "[tarjeta ••••1111] [CVV]"),
        ("1 4111 1111 1111 1111", "1 [tarjeta ••••1111]"),
        ("4111111111111111 12/27 123", "[tarjeta ••••1111] 12/27 [CVV]"),
        ("5555 5555 5555 4444 11 29 987", "[tarjeta ••••4444] 11 29 [CVV]"),
        ("ccv 987 y cód seg 456", "ccv [CVV] y cód seg [CVV]"),
        ("el código de atrás es 737", "el código de atrás es [CVV]"),
        ("OTP:382910", "OTP:[código]"),
        ("el código es:\n482913", "el código es:\n[código]"),
        ("mi NIP es 4321", "mi NIP es [código]"),
        ("habitación 1234, PIN de la caja 4321", "habitación 1234, PIN de la caja [código]"),
        ("código 1234-5678-9999", "código [código]"),
        ("código 482913 y 123456", "código [código] y 123456"),  # one keyword, one code
        ("cuenta ES91-2100-0418-4502-0005-1332", "cuenta [IBAN ES91••••1332]"),
        ("mi CBU es 0110599520000004123459", "mi CBU es [CBU ••••3459]"),
        ("DNI: 12.345.678-Z", "DNI: [DNI]"),
        ("cpf: 111 444 777 35", "cpf: [CPF]"),
        ("la contraseña que puse fue Perro123", "la contraseña que puse fue [contraseña]"),
        ("la clave de mi cuenta es Perro123", "la clave de mi cuenta es [contraseña]"),
        ("pass: Perro123", "pass: [contraseña]"),
        ("my pw is hunter2", "my pw is [contraseña]"),
        ("4111.1111.1111.1111", "[tarjeta ••••1111]"),
        ("4111\u00a01111\u00a01111\u00a01111", "[tarjeta ••••1111]"),
        (
            "el código que me mandaron por mensaje al celular fue el 948271",
            "el código que me mandaron por mensaje al celular fue el [código]",
        ),
    ],
)
def test_each_kind_becomes_a_readable_placeholder(text: str, expected: str) -> None:
    assert redact(text) == expected
    assert redact(expected) == expected  # twice changes nothing


@pytest.mark.parametrize(
    "text",
    [
        "código postal 28013",
        "el código de pedido es 88231",
        "mi pedido 12345678, y el código que me enviaron no va",
        "order code 55123, tracking 1Z999AA10123456784",
        "Llámame al +34 600 11 12 22 o al +5215512345678",
        "El precio es 1234 €, pedido #4578123, seguimiento LX123456789ES, 12/03/2026",
        "EAN 4006381333931",
        "cambié mi contraseña ayer y la clave no funciona",
        "la tarjeta 4111 1111 1111 1112 no pasa (a typo: no Luhn)",
        "IBAN ES91 2100 0418 4502 0005 1333 (a typo: no checksum)",
        "DNI 12345678A (wrong letter)",
        "Mi pedido 84731247 y el 021830 llegaron juntos",
        "Tracking number 28950116501705, it says delivered",
        "my passport expires in 2031 and the pass for the museum was 25 €",
        "error code 1603, código de error 0404",
        "password expired on 2024-05-01",
        "la contraseña caduca el 2025",
        "token de acceso expira en 3600 segundos",
        "code review tomorrow at 1030",
        "my password is not working",
        "password: forgot it",
        "La clave es que llegue el 15",
        "El precio es 1.234,56 € y el pedido 12345",
        "Llámame al +34 600 11 12 22 a las 10:30",
        "el código no me llega, lo pedí hace una hora y sigo esperando, mi pedido es el 12345678",
        "El precio es 1.234,56 € y la IP 192.168.1.1, el 12.03.2026",
    ],
)
def test_ordinary_numbers_and_near_misses_stay_as_written(text: str) -> None:
    assert redact(text) == text


@pytest.mark.parametrize(
    "text",
    [
        ("ES12" + "1" * 30 + " ") * 900,
        "ES12 ABCD " * 3200,
        "1 " * 16000,
        "1-" * 16000,
        "4111 " * 6400,
        "4" * 32000,
        "código " * 4000,
        "contraseña es " * 2000,
        "pin 1234 " * 3500,
        "calle Mayor " * 2700,
    ],
)
def test_no_input_of_the_largest_size_takes_long(text: str) -> None:
    """A turn may hold 32,000 characters: no pattern backtracks out of hand on one (each
    takes well under 0.25 s on a quiet machine; the bound leaves room for a loaded one)."""
    started = time.perf_counter()
    redact(text[:32000], KINDS)
    assert time.perf_counter() - started < 3.0


# -- round 2: secrets typed the way people type them (issue 40) -------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Cards: any separators between groups of any size, other digits, glued, after "pedido".
        ("tarjeta 4111  1111  1111  1111", "tarjeta [tarjeta ••••1111]"),
        ("4111\n1111\n1111\n1111", "[tarjeta ••••1111]"),
        ("4111/1111/1111/1111 y 4111_1111_1111_1111", "[tarjeta ••••1111] y [tarjeta ••••1111]"),
        ("4111 - 1111 - 1111 - 1111", "[tarjeta ••••1111]"),
        ("4111\t1111\t1111\t1111", "[tarjeta ••••1111]"),
        ("4111\u20091111\u200b1111\u200b1111", "[tarjeta ••••1111]"),
        ("4111 💳 1111 💳 1111 💳 1111", "[tarjeta ••••1111]"),
        ("411 111 111 111 1111", "[tarjeta ••••1111]"),
        ("4 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1", "[tarjeta ••••1111]"),
        ("(4111) 1111 1111 1111", "([tarjeta ••••1111]"),
        ("４１１１ １１１１ １１１１ １１１１", "[tarjeta ••••1111]"),
        ("٤١١١١١١١١١١١١١١١", "[tarjeta ••••1111]"),
        ("nro4111111111111111", "nro[tarjeta ••••1111]"),
        ("+4111 1111 1111 1111", "+[tarjeta ••••1111]"),
        ("Pagué el pedido con 5555 5555 5555 4444", "Pagué el pedido con [tarjeta ••••4444]"),
        # CVVs: next line, Portuguese, described, digit by digit.
        ("cvv:\n737", "cvv:\n[CVV]"),
        ("código de segurança 456", "código de segurança [CVV]"),
        ("los 3 números de atrás son 123", "los 3 números de atrás son [CVV]"),
        ("the 3 numbers on the back: 321", "the 3 numbers on the back: [CVV]"),
        ("cvv 7 3 7", "cvv [CVV]"),
        # One-time codes: pairs, digits, dots, keycaps, zero-width, a purpose.
        ("código 48 29 13", "código [código]"),
        ("el código es 4 8 2 9 1 3", "el código es [código]"),
        ("código 4.8.2.9.1.3", "código [código]"),
        ("código 4️⃣8️⃣2️⃣9️⃣", "código [código]"),
        ("código 48\u200b29\u200b13", "código [código]"),
        (
            "el código para recoger el paquete es 482913",
            "el código para recoger el paquete es [código]",
        ),
        (
            "o código para retirar a encomenda é 5521",
            "o código para retirar a encomenda é [código]",
        ),
        # IBANs.
        ("ES 91 2100 0418 4502 0005 1332", "[IBAN ES91••••1332]"),
        ("ES91.2100.0418.4502.0005.1332", "[IBAN ES91••••1332]"),
        ("ES91 2100 0418\n4502 0005 1332", "[IBAN ES91••••1332]"),
        ("ＥＳ９１ ２１００ ０４１８ ４５０２ ０００５ １３３２", "[IBAN ES91••••1332]"),
        # Passwords.
        ("minha senha é Perro123", "minha senha é [contraseña]"),
        ("contraseña：Perro123", "contraseña：[contraseña]"),
        ("contraseña ➡️ Perro123", "contraseña ➡️ [contraseña]"),
        ('mi contraseña es "perro azul feliz"', 'mi contraseña es "[contraseña]"'),
        ("my password is “blue sky 42”", "my password is “[contraseña]”"),
        # National ids, Mexico's CLABE.
        ("DNI 1234 5678 Z", "DNI [DNI]"),
        ("dni 12345678z", "dni [DNI]"),
        ("NIE x1234567l", "NIE [NIE]"),
        ("RFC GODE-561231-GR8", "RFC [RFC]"),
        ("CUIT 20.12345678.6", "CUIT [CUIT]"),
        ("cpf 111444777-35", "cpf [CPF]"),
        ("CPF 11144477735", "CPF [CPF]"),
        ("mi DNI es 30.123.456", "mi DNI es [DNI]"),
        ("mi clabe es 0321 8000 0118 3597 19", "mi clabe es [CLABE ••••9719]"),
        ("mi RUT es 12.345.678-5", "mi RUT es [RUT]"),
        # The digits after an expiry's word are the expiry, whatever their shape.
        (
            "num tarjeta 4111111111111111 venc 1225 cod 123",
            "num tarjeta [tarjeta ••••1111] venc 1225 cod [CVV]",
        ),
        (
            "los últimos tres dígitos del reverso: 456",
            "los últimos tres dígitos del reverso: [CVV]",
        ),
        # Values before the words that name them; quotes of every kind.
        (
            "G-482913 is your Google verification code.",
            "G-[código] is your Google verification code.",
        ),
        ("032180000118359719 es mi clabe", "[CLABE ••••9719] es mi clabe"),
        ("30123456 ese es el dni de mi papá", "[DNI] ese es el dni de mi papá"),
        ("717\nese es el de seguridad", "[CVV]\nese es el de seguridad"),
        ("the passphrase is *Amarelo abacaxi 12*", "the passphrase is *[contraseña]*"),
        ("mi clave: ‹saudade chocolate 238›", "mi clave: ‹[contraseña]›"),
        ("senha ´gato azul 9´", "senha ´[contraseña]´"),
        ("la clave es _perro azul 12_", "la clave es _[contraseña]_"),
        ("clave de acceso a la web: azul_2009", "clave de acceso a la web: [contraseña]"),
        ("Tu clave de operación es 781-896", "Tu clave de operación es [contraseña]"),
        ("security number 391", "security number [CVV]"),
        ("detrás del plástico pone 845", "detrás del plástico pone [CVV]"),
        ("N.I.E.: y-8384262-v", "N.I.E.: [NIE]"),
        # No digit in the text: the fast path must still know every password's word.
        ("psw: gatito", "psw: [contraseña]"),
        ("contra: gatito", "contra: [contraseña]"),
        ("frase secreta: 'gato azul feliz'", "frase secreta: '[contraseña]'"),
    ],
)
def test_secrets_written_as_people_type_them(text: str, expected: str) -> None:
    assert redact(text) == expected
    assert redact(expected) == expected


@pytest.mark.parametrize(
    "text",
    [
        "código de rastreo 482913",
        "código de afiliado 55321",
        "employee code 4821",
        "código de sucursal 0412",
        "product code 88123",
        "código do aluno 202312",
        "CEP 01310-100",
        "referência do Pix 123456",
        "el código de la oferta es 2024",
        "la clave es llamar antes de las 9",
        "my password is stolen",
        "a senha não funciona",
        "mi contraseña está bloqueada",
        "my password is too short",
        "Llámame al 611 22 33 44 o al 622 33 44 55",
        "mi número es +34 611 223 344",
        "mi pedido es el 12345678 y llega el 12.03.2026",
        "tengo 2 hijos de 4 y 6 años",
        "2017-2110 es mi código de estudiante",
        "(código de segurança) Año 2023",
        "mi clave de empleado es 7944891",
        "clave de inscripción 2025-111",
        "código 83272-W talla 38",
        "the code came at 10.50",
    ],
)
def test_ordinary_codes_and_words_stay_as_written(text: str) -> None:
    assert redact(text) == text


def test_a_cvv_named_after_an_aside_is_that_number_not_a_later_year() -> None:
    text = "964 (código de segurança, verso do cartão) Año 2023, kilómetros 32401"
    assert redact(text) == "[CVV] (código de segurança, verso do cartão) Año 2023, kilómetros 32401"


def test_the_placeholder_replaces_exactly_what_was_written() -> None:
    """Normalised characters inside a secret (zero-width, full-width, keycaps) go with it;
    those around it stay."""
    assert redact("a\u200b 4111\u200b1111\u200b1111\u200b1111 \u200bz") == (
        "a\u200b [tarjeta ••••1111] \u200bz"
    )
    assert redact("Café, código 4️⃣8️⃣2️⃣9️⃣ ¡gracias!") == "Café, código [código] ¡gracias!"


def test_numbers_in_metadata_are_redacted_too() -> None:
    assert redact_json({"card": 4111111111111111, "n": [5, {"x": 4111111111111111}]}) == {
        "card": "[tarjeta ••••1111]",
        "n": [5, {"x": "[tarjeta ••••1111]"}],
    }
    assert redact_json({"ok": True, "price": 12.5, "none": None}) == {
        "ok": True,
        "price": 12.5,
        "none": None,
    }


def test_an_iban_whose_digits_hold_a_card_stays_an_iban() -> None:
    text = "la cuenta para devolver el dinero FR65 0004 3647 2597 1574 3546 740"
    assert redact(text) == "la cuenta para devolver el dinero [IBAN FR65••••6740]"


def test_two_overlapping_cards_both_go() -> None:
    """Which of two overlapping Luhn-valid stretches is the card cannot be told: both go."""
    text = "My zip code is 17405-4731 ٥٠٦٧ ٨٩٨٤ ٦١٤٣ ١٨٢٣ es la mastercard"
    redacted = redact(text)
    assert "1823" not in redacted.replace("[tarjeta ••••1823]", "")
    assert redact(redacted) == redacted


_TRICKY = [
    *"0123456789 \n\t.-/,_()+:=\"'«»“”[]•",
    "\u200b", "\ufe0f", "\u20e3", "４", "٤", "👉", "➡️", "é", "ñ", "ß", "İ", "ﬁ", "½", "²",
    "código ", "cvv ", "clave ", "senha ", "tarjeta ", "IBAN ES", "DNI ", "es ", "e\u0301",
    "[tarjeta ••••1111]", "[código]", "\u0301", "4111 1111 1111 1111", "ES91 2100 0418 4502",
]  # fmt: skip


def test_any_mix_of_characters_is_redacted_once_and_for_all() -> None:
    """Random strings of digits, separators, marks, emoji, keywords and placeholders: no
    error, and a second pass changes nothing."""
    rng = random.Random(40)
    for _ in range(4000):
        glue = rng.choice(["", " ", " "])
        text = glue.join(rng.choice(_TRICKY) for _ in range(rng.randint(1, 60)))
        once = redact(text, KINDS)
        assert redact(once, KINDS) == once, text


def test_optional_kinds_only_when_asked() -> None:
    text = "escríbeme a ana.perez@gmail.com, calle Mayor 12, 3ºB"
    assert redact(text) == text
    assert redact(text, kinds_of(["default", "email", "address"])) == (
        "escríbeme a [email ••••@gmail.com], [dirección]"
    )
    assert redact("tarjeta 4111 1111 1111 1111", kinds_of(["iban"])).endswith("1111 1111")
    assert redact("tarjeta 4111 1111 1111 1111", kinds_of("off")) == "tarjeta 4111 1111 1111 1111"


def test_the_schema_knows_the_same_kinds() -> None:
    assert set(REDACT_KINDS) == set(KINDS)
    assert set(KINDS) > DEFAULT_KINDS
    with pytest.raises(ValueError):
        kinds_of(["card", "shoe_size"])


# -- the setting ----------------------------------------------------------------------------


def test_the_redact_setting_is_validated_and_shown(api: Api) -> None:
    url = f"/v1/agents/{AGENT}/settings"
    assert api.client.get(url, headers=admin()).json()["redact"] == sorted(DEFAULT_KINDS)
    for bad in ("all", ["card", "shoe_size"], 3, [1], {"card": True}, ["card"] * 20):
        assert_error(api.client.put(url, json={"redact": bad}, headers=admin()), 422)
    wider = api.client.put(url, json={"redact": ["default", "email"]}, headers=admin()).json()
    assert wider["redact"] == sorted(DEFAULT_KINDS | {"email"})
    assert api.client.put(url, json={"redact": "off"}, headers=admin()).json()["redact"] == []
    narrow = api.client.put(url, json={"redact": ["card"]}, headers=admin()).json()
    assert narrow["redact"] == ["card"]
    back = api.client.put(url, json={"redact": None}, headers=admin()).json()
    assert back["redact"] == sorted(DEFAULT_KINDS)
    agent_key = api.key(f"agent:{AGENT}")  # only an admin changes what is kept
    assert_error(api.client.put(url, json={"redact": "off"}, headers=agent_key), 403)


def test_turned_off_a_turn_is_kept_as_sent_and_turning_it_on_never_un_redacts(api: Api) -> None:
    url = f"/v1/agents/{AGENT}/settings"
    api.post_turn("tarjeta 4111 1111 1111 1111", event_id="on")
    api.client.put(url, json={"redact": "off"}, headers=admin())
    api.post_turn("tarjeta 4012 8888 8888 1881", event_id="off")
    api.client.put(url, json={"redact": "default"}, headers=admin())
    texts = [m["content"] for m in _messages(api)]
    assert texts == ["tarjeta 4012 8888 8888 1881", "tarjeta [tarjeta ••••1111]"]


def test_a_retry_of_a_redacted_turn_stores_nothing_again(api: Api) -> None:
    first = api.post_turn("mi pin es 4821", event_id="evt-1")
    again = api.post_turn("mi pin es 4821", event_id="evt-1")
    assert (first.status_code, again.status_code) == (201, 200)
    assert [m["content"] for m in _messages(api)] == ["mi pin es [código]"]


# -- every path that takes text, then every place that keeps it ------------------------------


@pytest.fixture
def llm() -> Iterator[FakeLLM]:
    with FakeLLM() as fake:
        # A model that repeats a secret (told in a turn stored before redaction was on, say):
        # what it writes is redacted too.
        fake.summary = "Paid with card 4012 8888 8888 1881; the code was 55337799."
        fake.facts = json.dumps(
            [
                {"content": "Card on file is 4012 8888 8888 1881", "type": "fact"},
                {"content": "Refund IBAN ES91 2100 0418 4502 0005 1332", "type": "fact"},
            ]
        )
        yield fake


def test_no_raw_secret_anywhere_after_turns_memories_compaction_and_search(
    api_factory: Callable[..., Api], llm: FakeLLM
) -> None:
    api: Api = api_factory(llm_base_url=llm.base_url, llm_retries=0)
    for i, (text, _) in enumerate(TURNS):
        assert api.post_turn(text, event_id=f"t{i}").status_code == 201
    stored = [m["content"] for m in _messages(api)]
    for (_, placeholder), content in zip(TURNS, reversed(stored), strict=True):
        assert placeholder in content, content
    memories = f"/v1/agents/{AGENT}/memories"
    made = api.client.post(
        memories, json={"content": f"DNI {DNI}, pin 9921", "phone": PHONE}, headers=admin()
    )
    assert made.status_code == 201 and made.json()["content"] == "DNI [DNI], pin [código]"
    with_metadata = api.client.post(
        memories,
        json={"content": "card on file", "phone": PHONE, "metadata": {"card": RAW[1]}},
        headers=admin(),
    )
    assert with_metadata.json()["metadata"] == {"card": "[tarjeta ••••5559]"}
    patched = api.client.patch(
        f"{memories}/{made.json()['id']}",
        json={"content": "Refund to ES91 2100 0418 4502 0005 1332"},
        headers=admin(),
    )
    assert patched.json()["content"] == "Refund to [IBAN ES91••••1332]"
    for i in range(30):  # enough turns to compact the secrets' ones
        api.post_turn(f"turn {i}", role="user" if i % 2 else "assistant", event_id=f"x{i}")
    compacted = api.client.post(f"/v1/agents/{AGENT}/people/{PHONE}/compact", headers=admin())
    assert compacted.status_code == 200 and compacted.json()["facts_added"] == 2
    api.index()

    prompts = json.dumps(llm.requests, ensure_ascii=False)
    assert "[tarjeta ••••5559]" in prompts  # the model read the redacted turns
    export = api.client.get(f"/v1/agents/{AGENT}/people/{PHONE}/export", headers=admin()).json()
    assert export["summary"]["text"] == "Paid with card [tarjeta ••••1881]; the code was [código]."
    assert sorted(m["content"] for m in export["memories"]) == [
        "Card on file is [tarjeta ••••1881]",
        "Refund IBAN [IBAN ES91••••1332]",
        "Refund to [IBAN ES91••••1332]",
        "card on file",
    ]
    staff = api.key("staff")
    answers = [
        json.dumps(export, ensure_ascii=False),
        api.context(query="tarjeta", threshold=-1).text,
    ]
    for mode in ("semantic", "keyword", "hybrid"):
        for query in ("tarjeta cvv código IBAN DNI contraseña", "5500005555555559"):
            body = {"query": query, "mode": mode}
            found = api.client.post("/v1/search", json=body, headers=staff)
            assert found.status_code == 200
            answers.append(found.text)
    by_number = {"query": "5500 0055 5555 5559", "mode": "keyword"}
    found = api.client.post("/v1/search", json=by_number, headers=staff).json()["items"]
    assert "[tarjeta ••••5559]" in found[0]["text"]  # the number finds its placeholder
    audit = api.client.get("/v1/audit", headers=admin()).text
    assert "[tarjeta ••••5559]" in audit
    everything = "\n".join([prompts, *answers, audit])
    if api.services.settings.database_url:  # PostgreSQL: the whole database, as pg_dump reads it
        everything += pg_dump(api.services.settings.database_url)
        assert "[IBAN ES91••••1332]" in everything
    data = api.services.settings.data_dir
    lance = lance_texts(data / "lance")
    assert "tarjeta" in lance  # the vectors' table holds the (redacted) turns
    for raw in [*RAW, "4012 8888 8888 1881", "55337799", "9921"]:
        assert raw not in everything, raw
        assert raw not in lance, raw
        for path in (p for p in data.rglob("*") if p.is_file()):
            assert raw.encode() not in path.read_bytes(), (raw, path)


def _messages(api: Api) -> list[dict[str, object]]:
    response = api.client.get(f"/v1/agents/{AGENT}/people/{PHONE}/messages", headers=admin())
    assert response.status_code == 200
    items: list[dict[str, object]] = response.json()["items"]
    return items
