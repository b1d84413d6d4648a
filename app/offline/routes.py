"""The offline routes."""

from fastapi import APIRouter

router = APIRouter()
