"""Stop words of the two languages the product's users write, for the full-text index.

Snowball's English and Spanish lists, each Spanish word also without its accents (people type
"esta" for "está" on a phone, and the index folds accents). A word on these lists is neither
indexed nor searched, so a question made only of them ("de la que") matches nothing instead of
every turn; LanceDB's own list is English only."""

from __future__ import annotations

import unicodedata

ENGLISH = """
i me my myself we our ours ourselves you your yours yourself yourselves he him his himself
she her hers herself it its itself they them their theirs themselves what which who whom this
that these those am is are was were be been being have has had having do does did doing a an
the and but if or because as until while of at by for with about against between into through
during before after above below to from up down in out on off over under again further then
once here there when where why how all any both each few more most other some such no nor not
only own same so than too very s t can will just don should now d ll m o re ve y ain aren
couldn didn doesn hadn hasn haven isn ma mightn mustn needn shan shouldn wasn weren won wouldn
"""

SPANISH = """
de la que el en y a los del se las por un para con no una su al lo como más pero sus le ya o
este sí porque esta entre cuando muy sin sobre también me hasta hay donde quien desde todo nos
durante todos uno les ni contra otros ese eso ante ellos e esto mí antes algunos qué unos yo
otro otras otra él tanto esa estos mucho quienes nada muchos cual poco ella estar estas algunas
algo nosotros mi mis tú te ti tu tus ellas nosotras vosotros vosotras os mío mía míos mías tuyo
tuya tuyos tuyas suyo suya suyos suyas nuestro nuestra nuestros nuestras vuestro vuestra
vuestros vuestras esos esas estoy estás está estamos estáis están esté estés estemos estéis
estén estaré estarás estará estaremos estaréis estarán estaría estarías estaríamos estaríais
estarían estaba estabas estábamos estabais estaban estuve estuviste estuvo estuvimos
estuvisteis estuvieron he has ha hemos habéis han haya hayas hayamos hayáis hayan habré habrás
habrá habremos habréis habrán habría habrías habríamos habríais habrían había habías habíamos
habíais habían hube hubiste hubo hubimos hubisteis hubieron soy eres es somos sois son sea seas
seamos seáis sean seré serás será seremos seréis serán sería serías seríamos seríais serían era
eras éramos erais eran fui fuiste fue fuimos fuisteis fueron tengo tienes tiene tenemos tenéis
tienen tenga tengas tengamos tengáis tengan tendré tendrás tendrá tendremos tendréis tendrán
tendría tendrías tendríamos tendríais tendrían tenía tenías teníamos teníais tenían tuve
tuviste tuvo tuvimos tuvisteis tuvieron
"""


def _fold(word: str) -> str:
    return "".join(
        ch for ch in unicodedata.normalize("NFD", word) if unicodedata.category(ch) != "Mn"
    )


# Spanish stop words that are English words people ask about ("my son", "the sea"): kept.
ENGLISH_WORDS = {"sea", "seas", "era", "eras", "son", "sin", "hay", "ante"}


def stop_words() -> list[str]:
    words = set(ENGLISH.split()) | (set(SPANISH.split()) - ENGLISH_WORDS)
    words |= {_fold(w) for w in words}
    return sorted(words)
