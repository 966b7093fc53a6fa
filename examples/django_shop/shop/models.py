from __future__ import annotations

from django.db import models


class Order(models.Model):
    item = models.CharField(max_length=100)
    quantity = models.PositiveIntegerField()
    paid = models.BooleanField(default=False)
    receipt_sent = models.BooleanField(default=False)
