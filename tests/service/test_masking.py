"""PII masking: phones keep first 3 and last 4 characters, addresses keep district and coarser."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from service.masking import mask_phone, mask_text, masked_dump
from service.shop.schemas import Address, MaskedAddress, masked_address

FULL_ADDRESS = {
    "recipient": "Ada Lovelace",
    "lines": ["12 St James's Square", "Flat 3"],
    "district": "St James's",
    "city": "London",
    "postal_code": "SW1Y 4JH",
    "country": "GB",
    "phone": "+447700900123",
}


@pytest.mark.parametrize(
    ("phone", "masked"),
    [
        ("+8613812345678", "+86*******5678"),
        ("+447700900123", "+44******0123"),
        ("+12025550147", "+12*****0147"),
    ],
)
def test_phone_keeps_first_three_and_last_four(phone, masked):
    assert mask_phone(phone) == masked
    assert len(mask_phone(phone)) == len(phone)


@pytest.mark.parametrize(
    ("phone", "masked"),
    [("123456789", "*******89"), ("12345678", "******78"), ("1234567", "*****67")],
)
def test_short_phone_keeps_only_its_last_two(phone, masked):
    # Below 10 characters, "first 3 + last 4" would reveal most of the number.
    assert mask_phone(phone) == masked


@pytest.mark.parametrize("phone", ["12345", "1", ""])
def test_tiny_phone_is_masked_entirely(phone):
    assert mask_phone(phone) == "*" * len(phone)


def test_masked_phone_hides_the_middle_digits():
    phone = "+8613812345678"
    assert "38123" not in mask_phone(phone)


def test_mask_text():
    assert mask_text("Ada Lovelace") == "***"
    assert mask_text("") == ""


def test_address_is_reduced_to_district_city_country():
    masked = masked_address(FULL_ADDRESS)
    assert masked == {
        "recipient": "***",
        "lines": ["***"],
        "district": "St James's",
        "city": "London",
        "postal_code": "***",
        "country": "GB",
        "phone": "+44******0123",
    }
    flattened = repr(masked)
    for secret in ("Ada", "Lovelace", "12 St James's Square", "Flat 3", "SW1Y", "4JH", "0900"):
        assert secret not in flattened


def test_address_without_phone_has_no_phone_key():
    without = {key: value for key, value in FULL_ADDRESS.items() if key != "phone"}
    assert "phone" not in masked_address(without)


def test_address_model_masks_itself():
    address = Address.model_validate(FULL_ADDRESS)
    assert address.masked() == masked_address(FULL_ADDRESS)
    # The masked form still fits the output model agents see.
    assert MaskedAddress(**address.masked()).city == "London"


class Holder(BaseModel):
    order_id: str
    address: Address
    history: list[Address]
    previous: Address | None = None
    count: int


def test_masked_dump_masks_nested_and_listed_models():
    address = Address.model_validate(FULL_ADDRESS)
    holder = Holder(order_id="ORD-1001", address=address, history=[address, address], count=2)
    dumped = masked_dump(holder)
    assert dumped == {
        "order_id": "ORD-1001",
        "address": masked_address(FULL_ADDRESS),
        "history": [masked_address(FULL_ADDRESS)] * 2,
        "count": 2,
    }
    assert "Lovelace" not in repr(dumped)
    assert "previous" not in dumped  # None fields are left out


def test_masked_dump_of_a_model_without_pii_is_its_json_dump():
    class Plain(BaseModel):
        name: str
        values: list[int]

    assert masked_dump(Plain(name="x", values=[1, 2])) == {"name": "x", "values": [1, 2]}
