"""Any valid content stored comes back byte-identical."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import AGENT, Api, admin

valid_text = st.text(
    # (no lone surrogates, no NUL: both are refused with 422, see test_hostile)
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
    min_size=1,
    max_size=2000,
).filter(lambda s: s.strip() != "")


# The app fixture is shared by all examples of the test (that is what the health check warns
# of); each example uses its own person, so examples do not see each other.
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(content=valid_text, n=st.integers(min_value=10_000_000, max_value=999_999_999))
def test_content_round_trips(api: Api, content: str, n: int) -> None:
    phone = f"+1555{n % 10_000_000:07d}"  # a number that can exist (+1 and ten digits)
    # Stored as sent: no redaction (test_redaction.py covers it; a generated text may hold a
    # Luhn-valid card number or a "pin 1234").
    api.client.put(f"/v1/agents/{AGENT}/settings", json={"redact": "off"}, headers=admin())
    response = api.post_turn(content, phone=phone)
    assert response.status_code == 201, response.text
    history = api.context(phone=phone).json()["history"]
    assert history[-1]["content"].encode("utf-8") == content.encode("utf-8")
    listed = api.client.get(
        f"/v1/agents/{AGENT}/people/{phone}/messages", params={"limit": 1}, headers=admin()
    ).json()["items"][0]
    assert listed["content"] == content
