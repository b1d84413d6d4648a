"""The AI tutor (issue 30): a chat about the learner's own loop and verdict, answered by any
OpenAI-compatible endpoint; absent when TREINO_TUTOR_URL is unset."""
