"""Varied test corpus for e5 parity (Spanish/English/code-switching/WhatsApp/emoji/URLs/long)."""
SHORT = [
    "¿Cómo se llama mi mascota?",
    "Tiene un perro llamado Toby",
    "Mi abuela Rosa cumple noventa años el catorce de mayo",
    "When is my granny having her birthday?",
    "My grandmother Rosa turns ninety on the fourteenth of May",
    "El niño comió piñata y jalapeños en la mañana",
    "Señor Muñoz, ¿ya llegó el pingüino al zoológico?",
    "cumpleaños feliz, te deseamos a ti 🎂🎉",
    "jajaja q onda wey xq no viniste?? 😂😂😂",
    "tmb voy mañana, porfa avísame k hora 🙏",
    "bss y abrazos!!! ❤️❤️",
    "ntp, nos vemos el finde 👍🏽",
    "la familia 👨‍👩‍👧‍👦 está completa 🇲🇽🇪🇸",
    "Mira este link: https://www.ejemplo.com/ruta?id=123&lang=es#seccion",
    "mándame un correo a juan.pérez@correo.es o llama al +52 55 1234 5678",
    "Cuesta $1,299.99 MXN o 59,90 € con IVA",
    "La reunión es el 14/05/2024 a las 15:30 hrs",
    "I'm so tired hoy, the meeting fue eterna y luego traffic horrible",
    "Let's go al cine later, ¿te late? 🎬",
    "My boss me dijo que el deadline es el viernes, so no weekend for me",
    "oye bro, did you send the invoice o todavía no?",
    "Estoy a dieta keto pero el pan dulce me llama 🥐",
    "Tengo alergia a los cacahuates y a la penicilina",
    "Trabajo como enfermera en el Hospital General desde 2019",
    "Mi hija Valentina entra a la primaria en septiembre",
    "ok",
    "👍",
    "sí",
    "   espacios   dobles   y\tTabulador\ty saltos\nde línea\r\nWindows  ",
    "texto con nbsp\u00a0aquí y zero\u200bwidth y ZWJ\u200dsolo",
    "acentos descompuestos: cumplean\u0303os, cafe\u0301, nin\u0303o",
    "ｆｕｌｌｗｉｄｔｈ ＡＢＣ １２３ y ligadura ﬁn… “comillas” «angulares»",
    "números: 1º, 2ª, ½ taza, x² + y² = z², 3×4=12",
    "código: def f(x): return x**2  # comentario",
    "hieroglyphs 𓀀𓀁𓀂 and rare 𝕏𝕐 and ꙮ",
    "中文测试，日本語のテスト、한국어 테스트",
    "Привет, как дела? Γειά σου κόσμε",
    "مرحبا بالعالم שלום עולם",
    "QUÉ BUENO QUE VINISTE!!!! GRACIAS!!!",
    "eeeeeeeeeeeee nooooooo mamaaaaa",
    "#FelizViernes @maria_lopez 🔥🔥 #TBT",
    "vamos a la playa🏖️mañana☀️ temprano",
    "precio: 3.5k, 10%, 24/7, 1e-3, 0xFF",
    "<s> literal specials </s> and <unk>",
    "C'est la vie, mon ami. Ça va très bien!",
    "O Brasil é lindo, não é? Açúcar e maçã",
    "Me siento triste porque mi papá está en el hospital 😢",
    "Recuérdame comprar leche, huevos y tortillas",
    "Prefiero el café sin azúcar ☕",
    "¡Qué padre! ¿Neta? No manches 🤯",
    "a\u0301rbol y A\u0300 y \u00c5ngstr\u00f6m y \u212b",
    "Emoji keycap 1️⃣ 2️⃣ #️⃣ y ©️ ®️ ™️",
    "tabs\t\t\tand\n\n\nnewlines",
    " leading space",
    "trailing space ",
]

_PAR_ES = ("Ayer fui al mercado con mi mamá y compramos aguacates, jitomates, cebolla y cilantro "
           "para hacer guacamole. Después pasamos a la panadería de Don Ramón, que siempre nos regala "
           "una concha extra. Mi hermano Julián llegó tarde porque el metro se quedó parado veinte minutos. ")
_PAR_EN = ("The quarterly report shows revenue grew 12% year over year, driven by strong demand in Latin "
           "America; however, operating costs rose as well, so the board asked us to review vendor contracts. ")
_PAR_MIX = ("oye, so the thing es que mañana tengo el dentist a las 9 y luego junta con el equipo 😅 "
            "pero x la tarde estoy libre, ¿quieres ir por unos tacos? jaja ")

LONG = [
    (_PAR_ES * 12).strip(),
    (_PAR_EN * 14).strip(),
    (_PAR_MIX * 20).strip(),
    ((_PAR_ES + _PAR_EN + _PAR_MIX) * 5).strip(),
    (_PAR_ES * 3 + _PAR_MIX * 3).strip(),   # ~300 tokens, under the limit
]

CORPUS = SHORT + LONG
