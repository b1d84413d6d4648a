"""The tutor's routes."""

from fastapi import APIRouter

router = APIRouter()
