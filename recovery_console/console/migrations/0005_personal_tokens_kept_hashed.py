"""Personal API tokens are kept as their SHA-256 only: each existing plain key is hashed into
the new table (so it goes on working) and its plain row deleted."""

import hashlib

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


def hash_plain_tokens(apps, schema_editor):
    Plain = apps.get_model("authtoken", "Token")
    Hashed = apps.get_model("console", "PersonalToken")
    for token in Plain.objects.all():
        digest = hashlib.sha256(token.key.encode()).hexdigest()
        Hashed.objects.create(user_id=token.user_id, digest=digest, created=token.created)
    Plain.objects.all().delete()


class Migration(migrations.Migration):
    dependencies = [
        ("console", "0004_policy_change_requests"),
        ("authtoken", "0004_alter_tokenproxy_options"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]
    operations = [
        migrations.CreateModel(
            name="PersonalToken",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("digest", models.CharField(max_length=64, unique=True)),
                ("created", models.DateTimeField()),
                (
                    "user",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="personal_token",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
        ),
        # Plain keys cannot be brought back: going back leaves people to issue new ones.
        migrations.RunPython(hash_plain_tokens, migrations.RunPython.noop),
    ]
