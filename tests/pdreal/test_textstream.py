"""Stop strings across token boundaries (issue 41 item 1): nothing of a stop string leaks."""

from __future__ import annotations

from pdreal.serving.textstream import TextStream


class PieceCodec:
    """Token i decodes to PIECES[i]; bytes of a split character are modelled by "\ufffd"."""

    PIECES = [" Paris", ".", " It", " is", " 201", "8", ":", "The", " capital", " of", "\ufffd", "é"]

    def decode(self, ids: list[int] | tuple[int, ...]) -> str:
        text = "".join(self.PIECES[i] for i in ids)
        # a lone half character (10) followed by its second half (11) decodes to one "é"
        return text.replace("\ufffdé", "é")


def run(ids: list[int], stops: tuple[str, ...]) -> tuple[list[str], TextStream]:
    stream = TextStream(PieceCodec(), stops)
    deltas = [stream.add([t]) for t in ids]
    deltas.append(stream.finish())
    return deltas, stream


def test_a_stop_string_spanning_tokens_shows_nothing_of_itself() -> None:
    deltas, stream = run([0, 1, 2], ("Paris.",))
    assert "".join(deltas) == " "  # before: " Paris" was shown before the "." completed the stop
    assert stream.stopped and stream.stop_tokens == 2 and stream.released_tokens == 2


def test_held_text_is_released_when_the_stop_is_ruled_out() -> None:
    deltas, stream = run([0, 2, 3], ("Paris.",))
    assert deltas == [" ", "Paris It", " is", ""]  # "Paris" held until " It" ruled the stop out
    assert not stream.stopped and "".join(deltas) == " Paris It is"


def test_stop_inside_a_token_cuts_its_leading_part_too() -> None:
    deltas, stream = run([3, 6, 4, 5, 6], ("2018",))
    assert "".join(deltas) == " is: "  # before: " is: 201"
    assert stream.stop_tokens == 4  # counted up to the token completing the stop ("8")
    deltas, _ = run([7, 8, 9, 0], ("capital of",))
    assert "".join(deltas) == "The "  # before: "The capital"


def test_finish_releases_a_held_prefix_and_tokens_follow_text() -> None:
    deltas, stream = run([2, 0], ("Paris.",))
    assert deltas == [" It", " ", "Paris"]
    assert stream.released_tokens == 2
    stream = TextStream(PieceCodec(), ())
    assert stream.add([10]) == "" and stream.released_tokens == 0  # half a character: held
    assert stream.add([11]) == "é" and stream.released_tokens == 2
