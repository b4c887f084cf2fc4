"""Live updates are a courtesy: a channel layer that is down never fails the write that
committed."""

import logging

import pytest

from recovery_console.console.models import Review
from tests.console.api.conftest import advice_on
from tests.test_settings import free_port


@pytest.mark.django_db(transaction=True)
def test_a_write_answers_2xx_when_the_channel_layer_is_down(api, cluster, settings, caplog):
    dead = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    settings.CHANNEL_LAYERS = {
        "default": {"BACKEND": "channels_redis.core.RedisChannelLayer", "CONFIG": {"hosts": [dead]}}
    }
    advice = advice_on(cluster, action="restart")
    with caplog.at_level(logging.ERROR, logger="fleet.events"):
        response = api("rita").post(f"/api/v1/advice/{advice.pk}/label/", {"agrees": True})
    assert response.status_code == 200
    assert Review.objects.get().advice_id == advice.pk
    [record] = caplog.records
    assert record.getMessage() == f"could not broadcast cluster.changed to cluster.{cluster.pk}"
    assert record.exc_info is not None
