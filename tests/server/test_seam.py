import pytest
from _service import asgi_client

from handrail.server import create_app


@pytest.mark.anyio
async def test_an_unknown_route_answers_a_404_problem(services):
    app = create_app(services)
    async with asgi_client(app) as client:
        answer = await client.get("/v1/nothing-here")
    assert answer.status_code == 404
    assert answer.json()["error"]["code"] == "NOT_FOUND"


@pytest.mark.anyio
async def test_the_openapi_document_is_served(services):
    async with asgi_client(create_app(services)) as client:
        answer = await client.get("/openapi.json")
    assert answer.status_code == 200
    assert answer.json()["info"]["title"] == "Handrail"
