"""The words the rules look for, written as the fold view reads them: lower case, no accents
("código" is "codigo", "cartão" is "cartao"). Spanish (Spain and Latin America), English and
Portuguese."""

from __future__ import annotations

import re

from server.redaction.text import MASKED

# A clause ends at a full stop, a question or an exclamation, a semicolon or a line break.
CLAUSE_END = re.compile(r"[.;!?\n](?:\s|$)|\n")

CARD_WORD = re.compile(
    r"tarjeta|card|cartao|visa|master|amex|american express|debito|credito|debit|credit|"
    r"plastico|cartao de credito|\bcc\b"
)

# Nouns that make a number an ordinary one (an order, a postcode, a discount, a tracking,
# an employee's or a student's code): "el código de rastreo 482913" is no secret.
ORDINARY = (
    r"pedidos?|order|orders|orden|ordem|compra|purchase|postal|zip|postcode|cep|cp|"
    r"seguimiento|rastreo|rastreio|rastreamento|tracking|track|envio|envios|shipping|shipment|"
    r"encomenda|paquete|package|parcel|guia|remessa|"
    r"descuento|discount|desconto|promo|promocion|promocional|promotion|promocao|cupon|coupon|"
    r"cupom|voucher|oferta|offer|"
    r"producto|product|produto|articulo|item|sku|ean|barras|barcode|modelo|model|serie|serial|"
    r"reserva|booking|reservation|localizador|vuelo|flight|voo|asiento|seat|assento|"
    r"habitacion|room|quarto|"
    r"referencia|reference|ref|factura|invoice|fatura|nota fiscal|boleto|recibo|receipt|"
    r"ticket|cliente|customer|client|socio|member|membership|afiliado|affiliate|afiliacion|"
    r"afiliacao|empleado|employee|funcionario|colaborador|staff|legajo|"
    r"estudiante|estudiantil|student|aluno|alumno|matricula|enrollment|enrolment|inscripcion|"
    r"inscricao|carnet|sucursal|branch|agencia|filial|oficina|tienda|shop|store|loja|comercio|"
    r"merchant|establecimiento|estabelecimento|afiliada|aff|referral|referido|indicacao|"
    r"pix|transaccion|transaction|transacao|"
    r"caso|case|incidencia|expediente|protocolo|protocol|chamado|reclamo|reclamacion|"
    r"area|pais|country|ddd|regalo|gift|version|versao|error|errores|erro|fallo|"
    r"http|html?|status|estado|precio|price|preco|"
    r"review|revision|revisao|curso|course|clase|aula|asignatura|materia|grupo|group|"
    r"lote|batch|contrato|contract|poliza|policy|apolice|medidor|contador|meter|suministro|"
    r"nis|cups|tarifa|talla|size|tamanho|color|cor|vendedor|seller|proveedor|supplier|fornecedor|"
    r"mesa|table|sala|terminal|anden|plataforma|bus|ruta|route|"
    r"numero de|number of|n de"
)
_ORDINARY = re.compile(rf"\b(?:{ORDINARY})\b")
# Words that date a number, or say it expired: "caduca el 2025", "expired on 2024-05-01".
_DATING = re.compile(
    r"\b(?:expira|expiro|expirou|expires?|expired|caduca|caduco|vence|vencio|venceu|validez|"
    r"validade|valid until|desde|since|until|hasta|ate|antes|before|after|despues|depois)\b"
)
# A purpose with a verb ("el código para recoger el pedido", "the code to pick up the order"):
# an ordinary noun after it is what the secret is for, not what the number is.
_PURPOSE = re.compile(
    r"\b(?:para|pra|pa|p/|to|for|pour)\s+(?:(?:poder|conseguir|be able to)\s+)?"
    r"(?:\w+(?:ar|er|ir|ing)\b|pick\b|get\b|collect\b|open\b|access\b|enter\b|log\b|sign\b|"
    r"unlock\b|confirm\b|verify\b|complete\b|finish\b|pay\b|release\b|receive\b)"
)


# Nouns that make a code a secret whatever it is for ("the collection code for my order",
# "código de verificación del pedido").
_SECRET_PURPOSE = re.compile(
    r"\b(?:collection|pickup|pick-up|pick\s+up|retirada|retiro|recogida|recoleccion|coleta|"
    r"entrega|delivery|desbloqueo|desbloqueio|unlock|acceso|acesso|access|login|ingreso|"
    r"seguridad|seguranca|security|confirmacion|confirmacao|confirmation|verificacion|"
    r"verificacao|verification|autorizacion|autorizacao|authorization|activacion|ativacao|"
    r"activation|validacion|validacao|otp|sms|2fa|one-time|un\s+solo\s+uso|dinamica|dinamico|"
    r"puerta|portao|porton|porteria|door|gate|edificio|building|portal|alarma|alarme|alarm|"
    r"caja\s+fuerte|cofre|safe|candado|cadeado|lock|locker|casillero)\b"
)


def ordinary_named(words: str) -> bool:
    """Whether these words (a keyword's gap, a clause before a number) name an ordinary number
    for itself, and not as the purpose of a secret ("para retirar el pedido", "the collection
    code for my order")."""
    found = _ORDINARY.search(words) or _DATING.search(words)
    if found is None:
        return False
    before = words[: found.start()]
    return _PURPOSE.search(before) is None and _SECRET_PURPOSE.search(before) is None


def clause_before(fold: str, start: int, width: int) -> str:
    """The words before `start` in its clause, at most `width` characters."""
    before = fold[max(0, start - width) : start]
    last = _UP_TO_CLAUSE_END.match(before)
    return before[last.end() :] if last else before


def clause_after(fold: str, end: int, width: int) -> str:
    """The words after `end` in its clause, at most `width` characters."""
    after = fold[end : end + width]
    stop = CLAUSE_END.search(after)
    return after[: stop.start()] if stop else after


_UP_TO_CLAUSE_END = re.compile(r".*(?:[.;!?](?:\s|$)|\n)", re.DOTALL)


def since_last_number(words: str) -> str:
    """Only the words since the last number or claimed span count: "habitación 1234, PIN de la
    caja 4321" names the room's number, not the PIN."""
    last = max(
        (i for i, ch in enumerate(words) if ch.isdigit() or "\ue000" <= ch <= "\ue007"),
        default=-1,
    )
    return words[last + 1 :]


def names_card(fold: str, start: int, end: int) -> bool:
    """Whether the clause around the number calls it a card ("la tarjeta es la ...", "... es
    mi visa"): then an issuer the card rule does not list is still a card."""
    return bool(CARD_WORD.search(clause_before(fold, start, 40) + fold[end : end + 15]))


GAP_CHARS = rf"[^\d{MASKED}\[]"  # what may stand between a keyword and its number


def secret_named(words: str) -> bool:
    """Whether these words name what a secret code is for ("de retirada", "verification")."""
    return _SECRET_PURPOSE.search(words) is not None
