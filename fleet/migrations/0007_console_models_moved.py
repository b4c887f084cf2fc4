"""Reviews, mode requests and notification channels now belong to the console app. Only
Django's record of where the models live changes here; their tables and rows stay (the console's
own migrations take them over)."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("recovery_console", "0006_audit_indexes"),
        ("console", "0001_models_from_recovery_console"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.DeleteModel(name="Review"),
                migrations.DeleteModel(name="ModeChangeRequest"),
                migrations.DeleteModel(name="NotificationChannel"),
            ],
            database_operations=[],
        )
    ]
