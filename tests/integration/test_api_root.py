"""The API's address in a browser leads to the console instead of a JSON 404."""

from __future__ import annotations

from tests.harness import ApiHarness


async def test_the_root_redirects_to_the_console(api: ApiHarness) -> None:
    response = await api.client.get("/", follow_redirects=False)
    assert response.status_code == 307
    assert response.headers["location"] == "/ui/"
    followed = await api.client.get("/", follow_redirects=True)
    assert followed.status_code == 200
    assert "text/html" in followed.headers["content-type"]
